#include "dist/collective_check.h"

#include "core/check.h"

#include <fmt/format.h>
#include <cstring>
#include <map>

#include "util/text.h"
#include "rankwise/error.h"

namespace rankwise::dist {

namespace {

constexpr int64_t kRecordLength = 32;
constexpr int64_t kMaxSizes = 10;
constexpr int64_t kReduceOpSlot = 16;
constexpr int64_t kLineSlot = 17;
constexpr int64_t kFileSlot = 18;  // kRecordLength - kFileSlot int64s of file name
constexpr std::size_t kFileBytes = (kRecordLength - kFileSlot) * sizeof(int64_t);
const char* const kOperations[] = {"all_reduce", "broadcast", "all_gather", "barrier"};
const char* const kReduceOps[] = {"sum", "avg", "min", "max"};

int64_t reduce_op_code(const std::string& reduce_op) {
  for (int64_t i = 0; i < 4; ++i) {
    if (reduce_op == kReduceOps[i]) return i;
  }
  return -1;
}

int64_t operation_code(const std::string& operation) {
  for (int64_t i = 0; i < 4; ++i) {
    if (operation == kOperations[i]) return i;
  }
  core::raise<Error>("internal error: unknown collective '{}'", operation);
}

// Everything but the call site: what must agree across ranks.
std::vector<int64_t> signature(const torch::Tensor& record) {
  const auto* r = record.data_ptr<int64_t>();
  return std::vector<int64_t>(r, r + kLineSlot);
}

}  // namespace

torch::Tensor encode_call(const CollectiveCall& call, uint64_t sequence) {
  auto record = torch::full({kRecordLength}, -1, torch::kInt64);
  auto* r = record.data_ptr<int64_t>();
  r[0] = static_cast<int64_t>(sequence);
  r[1] = operation_code(call.operation);
  r[4] = call.root;
  if (call.tensor.defined()) {
    r[2] = static_cast<int64_t>(call.tensor.scalar_type());
    r[3] = call.tensor.dim();
    r[5] = call.tensor.numel();
    for (int64_t d = 0; d < std::min<int64_t>(call.tensor.dim(), kMaxSizes); ++d) {
      r[6 + d] = call.tensor.size(d);
    }
  }
  r[kReduceOpSlot] = reduce_op_code(call.reduce_op);
  r[kLineSlot] = call.line;
  const auto slash = call.file.find_last_of('/');
  const std::string base = slash == std::string::npos ? call.file : call.file.substr(slash + 1);
  char bytes[kFileBytes] = {};
  std::memcpy(bytes, base.data(), std::min(base.size(), kFileBytes - 1));
  std::memcpy(r + kFileSlot, bytes, kFileBytes);
  return record;
}

std::string describe_call(const torch::Tensor& record) {
  const auto* r = record.data_ptr<int64_t>();
  const bool known = r[1] >= 0 && r[1] < 4;
  std::string text = known ? kOperations[r[1]] : "unknown collective";
  text += fmt::format(" #{}", r[0]);
  std::vector<std::string> details;
  if (r[3] >= 0) {
    std::string shape = c10::toString(static_cast<c10::ScalarType>(r[2]));
    shape += " [";
    for (int64_t d = 0; d < std::min(r[3], kMaxSizes); ++d) {
      shape += (d == 0 ? "" : ", ") + std::to_string(r[6 + d]);
    }
    if (r[3] > kMaxSizes) shape += fmt::format(", ... ({} elements)", r[5]);
    details.push_back(shape + "]");
  }
  if (r[kReduceOpSlot] >= 0 && r[kReduceOpSlot] < 4)
    details.push_back(kReduceOps[r[kReduceOpSlot]]);
  if (r[4] >= 0) details.push_back(fmt::format("root {}", r[4]));
  if (!details.empty()) text += " (" + util::join_strings(details) + ")";
  char file[kFileBytes + 1] = {};
  std::memcpy(file, r + kFileSlot, kFileBytes);
  if (file[0] != 0) text += fmt::format(" at {}:{}", file, r[kLineSlot]);
  return text;
}

std::string mismatch_message(const std::string& where, const std::vector<torch::Tensor>& records) {
  std::map<std::vector<int64_t>, std::vector<int>> by_call;
  std::vector<std::vector<int64_t>> order;  // distinct calls in order of their first rank
  for (std::size_t rank = 0; rank < records.size(); ++rank) {
    auto key = signature(records[rank]);
    if (by_call.find(key) == by_call.end()) order.push_back(key);
    by_call[key].push_back(static_cast<int>(rank));
  }
  if (by_call.size() == 1) return "";
  std::vector<std::string> calls;
  for (const auto& key : order) {
    const auto& ranks = by_call[key];
    calls.push_back(util::rank_list(ranks) + " called " +
                    describe_call(records[static_cast<std::size_t>(ranks.front())]));
  }
  return core::message(
      "{}: the ranks called different collectives: {}. Every rank must call the same collectives "
      "in the same order with the same shapes; a collective inside a branch that only some ranks "
      "take (e.g. `if (is_global_zero())`) is the usual cause: move it out of the branch and guard "
      "only the printing (print0)",
      where, util::join_strings(calls, "; "));
}

}  // namespace rankwise::dist
