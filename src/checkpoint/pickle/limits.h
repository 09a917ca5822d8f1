#pragma once
/// Limits on the pickles rankwise reads (both readers: pickle_value.h and
/// python_pickle.h).
#include <cstdint>

namespace rankwise::checkpoint::pickle {

/// Python's pickler recurses once per level and stops at Python's recursion
/// limit (1000); libtorch destroys an IValue recursively, so a value nested
/// 200,000 deep (a 600 KB pickle) would overflow the stack.
constexpr int kMaxDepth = 1000;
/// Memo ids: far above what any checkpoint needs (about 8 entries a tensor).
constexpr uint64_t kMaxMemo = uint64_t{1} << 22;

}  // namespace rankwise::checkpoint::pickle
