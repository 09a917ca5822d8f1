#include "dist/all_gather_ivalues.h"

#include <torch/serialize.h>
#include <torch/types.h>

#include "dist/all_gather_varlen.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::dist {

c10::List<c10::IValue> all_gather_ivalues(const c10::IValue& local) {
  c10::List<c10::IValue> result(c10::AnyType::get());
  if (!is_initialized() || process_group().world_size() == 1) {
    result.push_back(local);
    return result;
  }
  std::vector<char> bytes = torch::pickle_save(local);
  const auto all = all_gather_varlen(
      process_group(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8, [&](std::size_t) {
        return torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8);
      });
  for (const auto& pieces : all) {  // a pickle is never empty: every rank's bytes arrive
    const auto* data = reinterpret_cast<const char*>(pieces[0].data_ptr<uint8_t>());
    result.push_back(torch::pickle_load(std::vector<char>(data, data + pieces[0].numel())));
  }
  return result;
}

}  // namespace rankwise::dist
