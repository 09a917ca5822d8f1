// PaddingMask: which samples of a batch a metric leaves out.
#include "rankwise/metrics/padding_mask.h"
#include "util/text.h"

#include "metrics/common.h"
#include "rankwise/error.h"

namespace rankwise::metrics {

PaddingMask::PaddingMask(torch::Tensor is_padding) {
  if (!is_padding.defined()) return;
  const std::string where = context("PaddingMask", "PaddingMask");
  if (is_padding.dim() != 1) {
    fail(where, "the padding mask must be 1-D [N] (one entry per sample), got shape " +
                    shape_of(is_padding));
  }
  is_padding = is_padding.to(torch::kCPU);
  if (is_padding.scalar_type() != torch::kBool) {
    if (is_padding.is_floating_point() || is_padding.is_complex()) {
      fail(where, "the padding mask must be a bool tensor (true = padding), got dtype " +
                      dtype_of(is_padding));
    }
    if (is_padding.numel() > 0 &&
        (is_padding.min().item<int64_t>() < 0 || is_padding.max().item<int64_t>() > 1)) {
      fail(where, "an integer padding mask may hold only 0 and 1; pass a bool tensor");
    }
    is_padding = is_padding.to(torch::kBool);
  }
  mask_ = is_padding;
}

PaddingMask::PaddingMask(const std::vector<bool>& is_padding)
    : PaddingMask(is_padding, 0, static_cast<int64_t>(is_padding.size())) {}

PaddingMask::PaddingMask(const std::vector<bool>& shard_is_padding, int64_t offset,
                         int64_t length) {
  const auto size = static_cast<int64_t>(shard_is_padding.size());
  if (offset < 0 || length < 0 || offset + length > size) {
    fail(context("PaddingMask", "PaddingMask"),
         fmt::format("range [{}, {}) is outside the mask of {} entries; pass the batch's offset "
                     "and length within the shard",
                     offset, offset + length, size));
  }
  mask_ = torch::empty({length}, torch::kBool);
  auto* data = mask_.data_ptr<bool>();
  for (int64_t i = 0; i < length; ++i) data[i] = shard_is_padding[static_cast<size_t>(offset + i)];
}

torch::Tensor PaddingMask::keep(int64_t n, const std::string& who) const {
  if (empty()) return torch::ones({n}, torch::kBool);
  if (mask_.size(0) != n) {
    throw ConfigError(
        fmt::format("{}: the padding mask has {} entries but the batch has {} samples; pass the "
                    "part of DistributedSampler::is_padding() that matches this batch "
                    "(PaddingMask(mask, offset, length))",
                    who, mask_.size(0), n));
  }
  return mask_.logical_not();
}

}  // namespace rankwise::metrics
