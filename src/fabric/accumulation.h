#pragma once
// Gradient accumulation as a policy (FabricOptions::accumulate): where the
// training batch in flight stands in its group of micro-batches. A batch
// that does not end its group runs under the strategy's no_sync(); each
// batch's loss is weighed by its share of the group's samples.
#include <cstdint>
#include <memory>

namespace rankwise::fabric {

class Strategy;

class Accumulation {
 public:
  // A training batch [start, end) of a shard of `shard_size` starts, with
  // groups of `n` batches: under no_sync() of `strategy` unless it ends its group.
  void begin_batch(int64_t start, int64_t end, int64_t shard_size, int64_t n, Strategy& strategy);
  // The batch of `samples` finished; returns whether it ended its group
  // (the optimizer's step).
  bool end_batch(int64_t samples);
  // A pass starts or ends: no group in flight.
  void reset() { *this = Accumulation(); }

  // The factor of the batch in flight's loss: its share of the group's
  // samples (weighs() is false when a group is one batch).
  bool weighs() const { return size_ > 1; }
  double weight() const { return weight_; }
  // Whether the batch in flight ends its group (the optimizer steps).
  bool boundary() const { return boundary_; }
  // The samples of the group's batches so far (after its last: the group's).
  int64_t samples() const { return samples_; }

 private:
  int64_t done_ = 0;           // micro-batches of the group already trained
  int64_t size_ = 1;           // micro-batches in the group (fewer at a pass's end)
  int64_t samples_ = 0;        // samples of the group's batches so far
  int64_t total_samples_ = 1;  // samples of all the group's batches
  double weight_ = 1.0;        // the batch in flight's share of them: its loss's factor
  bool boundary_ = true;       // the batch in flight ends the group: the optimizer steps
  std::shared_ptr<void> no_sync_;  // held while a batch that does not end it runs
};

}  // namespace rankwise::fabric
