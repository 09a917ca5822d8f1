#pragma once
// The copy an asynchronous save writes from: every storage of a checkpoint
// value (take), or every tensor of a sharded state (take_each), copied once
// into host buffers that are kept and reused by the next snapshot, so that
// saving every N steps allocates nothing after the first.
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <vector>

namespace rankwise::checkpoint::async {

class HostSnapshot {
 public:
  /// A copy of `value` (as pickle::map_tensors) whose tensors are views, with
  /// their sizes, strides, offsets, dtypes and requires_grad, of copies of
  /// their storages in this object's buffers: tensors that share a storage
  /// share its copy, so the file written from the copy has the same tensor
  /// records as one written from `value` and loads bitwise the same (not
  /// byte for byte: the pickler memoizes only objects held elsewhere too;
  /// CUDA storages are recorded as CPU ones). The i-th distinct storage reuses the i-th buffer when it has
  /// the same size. CUDA storages are copied without blocking into pinned
  /// buffers: call wait_for_device_copies() before reading the copy. A tensor
  /// that is undefined, not strided, or lazily conjugated or negated is
  /// cloned instead (or kept, when undefined, for the writer to name).
  /// Invalidates the previous copy. Throws c10::Error from the copies.
  c10::IValue take(const c10::IValue& value);

  /// Copies of `tensors`, each holding only its own elements, contiguous, in
  /// a buffer of its own (not its whole storage: a chunk that views a few
  /// rows of a large tensor copies those rows), with its dtype, sizes and
  /// requires_grad. What a sharded save writes, one record per chunk: the
  /// records of the copies are byte for byte those of `tensors`. Undefined
  /// tensors are kept (for the writer to name). The i-th tensor reuses the
  /// i-th buffer when it has the same size; CUDA tensors, as in take().
  /// Invalidates the previous copy. Throws c10::Error from the copies.
  std::vector<at::Tensor> take_each(const std::vector<at::Tensor>& tensors);

  /// Blocks until the CUDA copies of the last take() have completed (a no-op
  /// without any). Any thread.
  void wait_for_device_copies() const;

  /// Bytes held in buffers (the extra memory of an asynchronous save).
  int64_t bytes() const;
  /// Buffers allocated since construction (flat once the state's storages stop changing).
  int64_t allocations() const { return allocations_; }

 private:
  at::Tensor buffer_for(std::size_t index, int64_t bytes, bool pinned);
  void record_device(c10::DeviceIndex index);  // a device whose copies wait_for_device_copies() waits for

  struct Buffer {
    at::Tensor tensor;  // uint8
    bool pinned;  // remembered: Tensor::is_pinned() asks the CUDA runtime
  };
  std::vector<Buffer> buffers_;  // one per distinct storage, in order of appearance
  std::vector<c10::DeviceIndex> devices_;  // CUDA devices the last take() or take_each() copied from
  int64_t allocations_ = 0;
};

}  // namespace rankwise::checkpoint::async
