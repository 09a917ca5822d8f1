#include "fabric/accumulation.h"

#include <algorithm>

#include "fabric/strategy.h"

namespace rankwise::fabric {

void Accumulation::begin_batch(int64_t start, int64_t end, int64_t shard_size, int64_t n, Strategy& strategy) {
  no_sync_.reset();
  if (done_ == 0) samples_ = 0;
  if (n == 1) return;
  const int64_t batch = end - start;  // every batch of a pass is full but its last
  if (done_ == 0) {
    size_ = std::min(n, (shard_size - start + batch - 1) / batch);
    total_samples_ = std::min(n * batch, shard_size - start);
  }
  weight_ = static_cast<double>(batch) / static_cast<double>(total_samples_);
  boundary_ = done_ + 1 >= size_;
  if (!boundary_) no_sync_ = strategy.no_sync();
}

bool Accumulation::end_batch(int64_t samples) {
  no_sync_.reset();
  samples_ += samples;
  if (!boundary_) {
    done_ += 1;
    return false;
  }
  done_ = 0;
  return true;
}

}  // namespace rankwise::fabric
