#include "parallel/ddp/model_layout.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cctype>

#include "util/text.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::parallel::ddp {
namespace {

constexpr int64_t kMaxDims = 8;  // dims beyond this are folded into the last slot
constexpr int64_t kRow = 2 + kMaxDims;  // [dtype, ndim, sizes...]

std::string describe(const torch::Tensor& row) {
  const auto ndim = row[1].item<int64_t>();
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < std::min(ndim, kMaxDims); ++d) {
    sizes.push_back(row[2 + d].item<int64_t>());
  }
  std::string s = "[" + util::join_strings(sizes) + "] ";
  // c10's name lowercased is the torch.<dtype> alias Python users know (float, double, half).
  std::string dtype = c10::toString(static_cast<c10::ScalarType>(row[0].item<int64_t>()));
  for (auto& c : dtype) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s + dtype;
}

}  // namespace

void check_same_parameter_layout(dist::ProcessGroup& group,
                                 const std::vector<torch::Tensor>& params,
                                 const std::vector<std::string>& names) {
  const std::string prefix =
      core::message(core::at(group), "DistributedDataParallel: the model differs across ranks: ");
  const std::string advice = ". Build the same model on every rank";
  const auto count = static_cast<int64_t>(params.size());
  auto counts = group.all_gather(torch::tensor({count}, torch::kInt64));
  std::vector<std::string> ranks;
  for (int r = 1; r < group.world_size(); ++r) {
    if (!counts[r].equal(counts[0])) {
      ranks.push_back(fmt::format("{} has {}", r, counts[r].item<int64_t>()));
    }
  }
  if (!ranks.empty()) {
    throw ConfigError(fmt::format("{}rank 0 has {} parameters that require a gradient, rank {}{}",
                                  prefix, counts[0].item<int64_t>(), util::join_strings(ranks),
                                  advice));
  }
  auto layout = torch::zeros({count, kRow}, torch::kInt64);
  auto rows = layout.accessor<int64_t, 2>();
  for (int64_t i = 0; i < count; ++i) {
    const auto& p = params[static_cast<std::size_t>(i)];
    rows[i][0] = static_cast<int64_t>(p.scalar_type());
    rows[i][1] = p.dim();
    for (int64_t d = 0; d < p.dim(); ++d) {
      const auto slot = 2 + std::min(d, kMaxDims - 1);
      rows[i][slot] = d < kMaxDims ? p.size(d) : rows[i][slot] * p.size(d);
    }
  }
  auto all = group.all_gather(layout);
  for (int64_t i = 0; i < count; ++i) {
    std::vector<std::string> differ;
    for (int r = 1; r < group.world_size(); ++r) {
      if (!all[r][i].equal(all[0][i])) {
        differ.push_back(fmt::format("rank {}: {}", r, describe(all[r][i])));
      }
    }
    if (!differ.empty()) {
      throw ConfigError(fmt::format("{}parameter {} ('{}' on this rank) is {} on rank 0 but {}{}",
                                    prefix, i, names[static_cast<std::size_t>(i)],
                                    describe(all[0][i]), util::join_strings(differ), advice));
    }
  }
}

}  // namespace rankwise::parallel::ddp
