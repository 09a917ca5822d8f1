// torch_world_probe: a tiny rankwise worker for the multi-node tests. It joins
// the process group, prints the sanity header (collective), checks one
// all_reduce and prints one line:
//   "probe rank R local_rank L node N world W sum S"
// where S is the all_reduce sum of the ranks (W*(W-1)/2 when correct).
#include <torch/torch.h>

#include <chrono>

#include "rankwise/log.h"
#include "rankwise/process_group.h"

int main() {
  auto& group = rankwise::init(rankwise::InitOptions().timeout(std::chrono::seconds(60)));
  rankwise::print_header();
  auto t = torch::tensor({static_cast<int64_t>(group.rank())});
  rankwise::all_reduce(t);
  rankwise::print("probe rank {} local_rank {} node {} world {} sum {}", group.rank(),
                  group.local_rank(), group.env().node_rank, group.world_size(),
                  t.item<int64_t>());
  rankwise::barrier();
  return 0;
}
