#include "dist/all_gather_varlen.h"

#include <algorithm>

namespace rankwise::dist {

std::vector<std::vector<torch::Tensor>> all_gather_varlen(
    ProcessGroup& group, const std::vector<int64_t>& lengths, torch::ScalarType dtype,
    const std::function<torch::Tensor(std::size_t)>& piece, VarlenGatherStats* stats) {
  VarlenGatherStats issued;
  const auto world = static_cast<std::size_t>(group.world_size());
  const std::size_t k = lengths.size();
  auto mine = torch::empty({static_cast<int64_t>(k)}, torch::kInt64);
  for (std::size_t j = 0; j < k; ++j) mine[static_cast<int64_t>(j)] = lengths[j];
  const auto all_lengths = group.all_gather(mine);
  issued.all_gathers += 1;
  issued.elements += static_cast<int64_t>(k);
  std::vector<std::vector<int64_t>> len(world, std::vector<int64_t>(k));
  for (std::size_t r = 0; r < world; ++r) {
    for (std::size_t j = 0; j < k; ++j) {
      len[r][j] = all_lengths[r][static_cast<int64_t>(j)].item<int64_t>();
    }
  }
  std::vector<int64_t> offset(k);
  int64_t total = 0;
  for (std::size_t j = 0; j < k; ++j) {
    int64_t longest = 0;
    for (std::size_t r = 0; r < world; ++r) longest = std::max(longest, len[r][j]);
    offset[j] = total;
    total += longest;
  }
  std::vector<std::vector<torch::Tensor>> result;
  if (total > 0) {  // every rank sees the same lengths, so all gather or none
    auto buffer = torch::zeros({total}, dtype);
    for (std::size_t j = 0; j < k; ++j) {
      const torch::Tensor p = piece(j);
      buffer.narrow(0, offset[j], p.numel()).copy_(p);
    }
    const auto all = group.all_gather(buffer);
    issued.all_gathers += 1;
    issued.elements += total;
    result.assign(world, std::vector<torch::Tensor>(k));
    for (std::size_t r = 0; r < world; ++r) {
      for (std::size_t j = 0; j < k; ++j) result[r][j] = all[r].narrow(0, offset[j], len[r][j]);
    }
  }
  if (stats) {
    stats->all_gathers += issued.all_gathers;
    stats->elements += issued.elements;
  }
  return result;
}

}  // namespace rankwise::dist
