// torch_world_probe: a tiny rankwise worker for the multi-node tests. It joins
// the process group, prints the sanity header (collective), checks one
// all_reduce and prints one line:
//   "probe rank R local_rank L node N world W sum S"
// where S is the all_reduce sum of the ranks (W*(W-1)/2 when correct).
#include <torch/torch.h>

#include <chrono>

#include "rankwise/monitor/job_header.h"
#include "rankwise/log.h"
#include "rankwise/dist/process_group.h"

int main() {
  auto& group = rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
  rankwise::monitor::print_header();
  auto t = torch::tensor({static_cast<int64_t>(group.rank())});
  rankwise::dist::all_reduce(t);
  rankwise::print("probe rank {} local_rank {} node {} world {} sum {}", group.rank(),
                  group.local_rank(), group.env().node_rank, group.world_size(),
                  t.item<int64_t>());
  rankwise::dist::barrier();
  return 0;
}
