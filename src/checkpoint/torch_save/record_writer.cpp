#include "checkpoint/torch_save/record_writer.h"

#include "core/check.h"

#include <algorithm>

#include "checkpoint/torch_save/dtype_names.h"
#include "checkpoint/pickle/pickle_writer.h"
#include "checkpoint/torch_save/archive.h"
#include "util/crc32.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::torch_save {
namespace {

// Bytes of a non-contiguous tensor copied at a time.
constexpr int64_t kPieceBytes = int64_t{8} << 20;

// Strides of a contiguous tensor of `sizes` (as at::empty gives them: a dimension of size 0 counts as 1).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

// data.pkl as torch.save writes it for a contiguous tensor with its own storage "0":
// torch._utils._rebuild_tensor_v2(persistent_id(("storage", torch.<Type>Storage, "0", "cpu", numel)),
//                                 0, size, stride, False, collections.OrderedDict())
std::string data_pkl(const char* storage_type, const std::vector<int64_t>& sizes, int64_t numel) {
  pickle::PickleWriter p;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.string("storage");
  p.global("torch", storage_type);
  p.string("0");
  p.string("cpu");
  p.integer(numel);
  p.tuple();
  p.persistent_id();
  p.integer(0);  // storage offset
  p.mark();
  for (int64_t s : sizes) p.integer(s);
  p.tuple();
  p.mark();
  for (int64_t s : contiguous_strides(sizes)) p.integer(s);
  p.tuple();
  p.boolean(false);  // requires_grad
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.tuple();
  p.reduce();
  return p.finish();
}

// The CRC-32 of each `block` bytes of a stream given in pieces of any size.
class BlockCrcs {
 public:
  explicit BlockCrcs(int64_t block) : block_(block) {}
  void add(const char* data, std::size_t size) {
    while (size > 0) {
      const std::size_t n = std::min(size, static_cast<std::size_t>(block_ - filled_));
      crc_ = util::crc32_update(crc_, data, n);
      filled_ += static_cast<int64_t>(n);
      data += n;
      size -= n;
      if (filled_ == block_) flush();
    }
  }
  // Ends the last block; the blocks' CRCs.
  std::vector<uint32_t> finish() {
    if (filled_ > 0) flush();
    return std::move(crcs_);
  }
  // The CRC of the whole stream, combined from the blocks' (crc32_combine: no second pass over the data).
  uint32_t whole() const { return whole_; }

 private:
  void flush() {
    crcs_.push_back(crc_);
    whole_ = util::crc32_combine_lengths(whole_, crc_, static_cast<uint64_t>(filled_));
    crc_ = 0;
    filled_ = 0;
  }
  int64_t block_;
  int64_t filled_ = 0;
  uint32_t crc_ = 0;
  uint32_t whole_ = 0;
  std::vector<uint32_t> crcs_;
};

}  // namespace

WrittenRecord write_tensor_record(const at::Tensor& tensor, int64_t block_bytes, const ByteSink& sink) {
  if (!tensor.defined() || !tensor.device().is_cpu() || tensor.layout() != c10::kStrided) {
    core::raise<CheckpointError>(
        "a checkpoint record needs a defined dense CPU tensor; move it with .cpu() (and "
        ".to_dense()) first");
  }
  if (block_bytes <= 0)
    core::raise<CheckpointError>("write_tensor_record: block_bytes must be positive");
  const DtypeNames* names = dtype_names(tensor.scalar_type());
  if (names == nullptr) {
    core::raise<CheckpointError>(
        "a checkpoint record cannot hold dtype {}; convert the tensor to one DCP stores",
        c10::toString(tensor.scalar_type()));
  }
  const int64_t numel = tensor.numel();
  const int64_t size = numel * static_cast<int64_t>(tensor.element_size());

  WrittenRecord r;
  StorageWriter storage{static_cast<uint64_t>(size), [&](const ByteSink& out) {
                          BlockCrcs crcs(block_bytes);
                          for_each_byte_piece(tensor, kPieceBytes, [&](const char* data, std::size_t n) {
                            crcs.add(data, n);
                            out(data, n);
                          });
                          r.block_crc32 = crcs.finish();
                          return crcs.whole();
                        }};
  const WrittenArchive archive =
      write_torch_save_archive(data_pkl(names->storage, tensor.sizes().vec(), numel), {storage}, sink);
  std::size_t data_part = 0;
  while (archive.parts[data_part].storage != 0) ++data_part;
  r.length = static_cast<int64_t>(archive.length);
  r.data_begin = static_cast<int64_t>(archive.parts[data_part].offset);
  r.data_size = size;
  r.header_crc32 = archive.crc32_of(0, data_part);
  r.trailer_crc32 = archive.crc32_of(data_part + 1, archive.parts.size());
  return r;
}

}  // namespace rankwise::checkpoint::torch_save
