// The consumer test's program (tests/consumer/CMakeLists.txt): compiled
// against rankwise's public headers only (narrow ones, not torch/torch.h),
// run on 2 ranks by rankwise-run. Rank r contributes r + 1 to an all_reduce;
// rank 0 prints the sum (3) with fmt, through print0.
#include "rankwise/env.h"
#include "rankwise/log.h"
#include "rankwise/dist/process_group.h"

int main() {
  auto parsed = rankwise::LaunchEnv::from_map({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  rankwise::dist::init();
  auto value = torch::tensor({rankwise::dist::rank() + 1.0}, torch::kFloat64);
  rankwise::dist::all_reduce(value);
  rankwise::print0("consumer: rankwise {} | world size {} | sum {} | from_map rank {}/{}",
                   RANKWISE_VERSION, rankwise::dist::world_size(), value.item<double>(), parsed.rank,
                   parsed.world_size);
  rankwise::dist::shutdown();
}
