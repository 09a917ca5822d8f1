// detail::adapt_python_pickle(), the rewriter that makes Python's pickles
// readable by libtorch 1.13's Unpickler, on arbitrary bytes. Beyond "no
// crash, only CheckpointError", it checks that a rewritten pickle is a fixed
// point of the rewrite: nothing is left that the rewrite would change again.
#include <cstdio>
#include <cstdlib>

#include "checkpoint/detail/python_pickle.h"
#include "rankwise/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string rewritten;
  try {
    rewritten = rankwise::detail::adapt_python_pickle(reinterpret_cast<const char*>(data), size);
  } catch (const rankwise::CheckpointError&) {
    return 0;
  }
  std::string again;
  try {
    again = rankwise::detail::adapt_python_pickle(rewritten.data(), rewritten.size());
  } catch (const rankwise::CheckpointError& e) {
    std::fprintf(stderr, "the rewrite rejects its own output: %s\n", e.what());
    std::abort();
  }
  if (again != rewritten) {
    std::fprintf(stderr, "the rewrite of a rewritten pickle changed it again\n");
    std::abort();
  }
  return 0;
}
