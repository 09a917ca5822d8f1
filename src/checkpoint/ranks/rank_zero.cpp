#include "checkpoint/ranks/rank_zero.h"

#include "core/check.h"

#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "dist/all_gather_ivalues.h"
#include "util/text.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint::ranks {
namespace {

constexpr int64_t kMaxErrorBytes = 4096;

// Rank 0's outcome, sent to every rank: empty when the work succeeded.
std::string share_outcome(dist::ProcessGroup& group, const std::string& error) {
  auto buffer = torch::zeros({kMaxErrorBytes + 1}, torch::kUInt8);
  if (group.rank() == 0 && !error.empty()) {
    auto n = std::min<int64_t>(static_cast<int64_t>(error.size()), kMaxErrorBytes);
    buffer[0] = 1;
    std::memcpy(buffer.data_ptr<uint8_t>() + 1, error.data(), static_cast<std::size_t>(n));
  }
  group.broadcast(buffer, 0);
  if (buffer[0].item<uint8_t>() == 0) return {};
  const char* text = reinterpret_cast<const char*>(buffer.data_ptr<uint8_t>() + 1);
  return std::string(text, strnlen(text, kMaxErrorBytes));
}

// Runs `work`: "" when it returns, else its error's message.
std::string outcome_of(const std::function<void()>& work, const std::string& what) {
  try {
    work();
    return "";
  } catch (const std::exception& e) {
    return e.what()[0] != '\0' ? e.what() : "unknown error";
  } catch (...) {
    return core::message("{} failed with an exception that is not a std::exception", what);
  }
}

}  // namespace


void on_rank_zero(const std::function<void()>& work, const std::string& what) {
  const bool distributed = dist::is_initialized() && dist::process_group().world_size() > 1;
  const int my_rank = dist::rank_or_zero();
  std::string error;
  if (my_rank == 0) error = outcome_of(work, what);
  if (distributed) error = share_outcome(dist::process_group(), error);
  if (!error.empty() && !distributed) throw CheckpointError(error);  // one process: nothing to add
  if (!error.empty() && my_rank == 0) {
    throw CheckpointError(fmt::format("{} (raised on rank 0 for {})", error, what));
  }
  if (!error.empty()) {  // wire::echoed_rank reads rank 0 from it: the root cause is rank 0's
    throw CheckpointError(fmt::format("{} (rank 0's error, raised on rank {} for {})", error, my_rank, what));
  }
}

void on_ranks(bool mine, const std::function<void()>& work, const std::string& what) {
  const int my_rank = dist::rank_or_zero();
  const std::string error = mine ? outcome_of(work, what) : std::string();
  const auto outcomes = dist::all_gather_ivalues(c10::IValue(error));
  std::vector<std::string> failures;
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    const std::string& text = outcomes.get(r).toStringRef();
    if (!text.empty()) failures.push_back(fmt::format("rank {}: {}", r, text));
  }
  if (!failures.empty()) {
    throw CheckpointError(
        fmt::format("{} (raised on rank {} for {})", util::join_strings(failures, "; "), my_rank, what));
  }
}

c10::impl::GenericDict decided_on_rank_zero(const std::function<void(c10::impl::GenericDict&)>& decide) {
  const int me = dist::rank_or_zero();
  c10::impl::GenericDict decided(c10::StringType::get(), c10::AnyType::get());
  if (me == 0) {
    try {
      decide(decided);
    } catch (const CheckpointError& e) {
      decided = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
      decided.insert("error", std::string(e.what()));
    }
  }
  if (dist::is_initialized() && dist::process_group().world_size() > 1) {
    decided = dist::all_gather_ivalues(c10::IValue(decided)).get(0).toGenericDict();
  }
  if (decided.contains("error")) {
    const std::string error = decided.at("error").toStringRef();
    throw CheckpointError(me == 0 ? error : fmt::format("{} (raised on rank 0, which decides)", error));
  }
  return decided;
}

}  // namespace rankwise::checkpoint::ranks
