// torch_size_mismatch: ranks all_reduce tensors of different sizes, with the
// collective check off (dist::InitOptions check_collectives false, the
// default), so that Gloo sees the mismatch first. For the launcher's summary
// test (tests/unit/launch/launcher_test.cpp): Gloo aborts a rank with
// "[enforce fail at pair.cc:...] op.preamble.length <= op.nbytes".
//
//   torch_size_mismatch
//
// Rank 0 reduces 256 floats, every other rank 3, at the line marked below.
#include <torch/types.h>

#include <cstdio>

#include "rankwise/dist/process_group.h"
#include "rankwise/run_main.h"

namespace {

int run(int, char**) {
  rankwise::dist::init(rankwise::dist::InitOptions().check_collectives(false));
  const int rank = rankwise::dist::rank();
  auto tensor = torch::ones({rank == 0 ? 256 : 3});
  rankwise::dist::all_reduce(tensor);  // the mismatched all_reduce
  std::printf("reduced %lld\n", static_cast<long long>(tensor.numel()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
