#include "rankwise/checkpoint/checkpoint.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <unistd.h>

#include "checkpoint/detail/atomic_file.h"
#include "rankwise/error.h"
#include "rankwise/process_group.h"

namespace rankwise {
namespace {

constexpr int64_t kMaxErrorBytes = 4096;

// Rank 0's outcome, sent to every rank: empty when the save succeeded.
std::string share_outcome(ProcessGroup& group, const std::string& error) {
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

}  // namespace

Checkpoint::Checkpoint() : dict_(c10::StringType::get(), c10::AnyType::get()) {}

void Checkpoint::insert(const std::string& key, c10::IValue value) {
  dict_.insert_or_assign(key, std::move(value));
}

bool Checkpoint::contains(const std::string& key) const { return dict_.contains(key); }

std::vector<std::string> Checkpoint::keys() const {
  std::vector<std::string> result;
  for (const auto& entry : dict_) result.push_back(entry.key().toStringRef());
  return result;
}

const c10::IValue& Checkpoint::at(const std::string& key) const {
  auto it = dict_.find(key);
  if (it == dict_.end()) {
    std::string present;
    for (const auto& k : keys()) present += (present.empty() ? "" : ", ") + k;
    throw CheckpointError("rankwise: checkpoint has no entry '" + key + "' (it has: " + present +
                          ")");
  }
  return it->value();
}

void save(const std::string& path, const Checkpoint& state) {
  const bool distributed = is_initialized() && process_group().world_size() > 1;
  const int my_rank = is_initialized() ? process_group().rank() : 0;
  std::string error;
  if (my_rank == 0) {
    try {
      std::vector<char> bytes = torch::pickle_save(c10::IValue(state.dict()));
      detail::write_file_atomically(path, bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (distributed) {
    // The broadcast doubles as the barrier: nobody returns before the rename.
    error = share_outcome(process_group(), error);
  }
  if (!error.empty()) {
    throw CheckpointError(error + " (raised on rank " + std::to_string(my_rank) +
                          " for the save by rank 0)");
  }
}

void check_checkpoint_path(const std::string& path) {
  const std::string dir = detail::directory_of(path);
  if (::access(dir.c_str(), W_OK) != 0) {
    throw CheckpointError("rankwise: the checkpoint directory '" + dir +
                          "' does not exist or is not writable; create it or choose another "
                          "checkpoint path");
  }
}

Checkpoint load(const std::string& path) {
  std::string bytes = detail::read_file(path);
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    throw CheckpointError("rankwise: '" + path + "' is not a readable checkpoint (truncated or "
                          "not written by torch.save / rankwise::save): " +
                          e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw CheckpointError("rankwise: '" + path + "' is not a readable checkpoint (truncated or "
                          "not written by torch.save / rankwise::save): " + e.what());
  }
  if (!value.isGenericDict()) {
    throw CheckpointError("rankwise: '" + path + "' holds a " + value.tagKind() +
                          ", not a dict; it is not a rankwise checkpoint");
  }
  Checkpoint result;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      throw CheckpointError("rankwise: '" + path + "' has a non-string key");
    }
    result.insert(entry.key().toStringRef(), entry.value());
  }
  return result;
}

}  // namespace rankwise
