#pragma once
// Helpers of the sharded-checkpoint tests.
#include <string>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"

namespace rankwise::test {

/// The CheckpointError load_sharded(dir, state) throws, or "no error".
inline std::string sharded_load_error(const std::string& dir, checkpoint::ShardedState state) {
  try {
    checkpoint::load_sharded(dir, state);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace rankwise::test
