#pragma once
// "rank 1/4": which rank of how many raised an error; the prefix after
// "rankwise: " of the library's error messages. Built here only.
#include <string>

#include "rankwise/process_group.h"

namespace rankwise {
namespace detail {

inline std::string where(int rank, int world_size) {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world_size);
}

inline std::string where(const ProcessGroup& group) {
  return where(group.rank(), group.world_size());
}

/// This process: rankwise::rank() and world_size() (the process group's, or
/// the launch environment's before init(); throws ConfigError as they do).
inline std::string where() { return where(rankwise::rank(), rankwise::world_size()); }

}  // namespace detail
}  // namespace rankwise
