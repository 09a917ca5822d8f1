#include "rankwise/checkpoint/manager.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include "checkpoint/detail/agreed_read.h"
#include "checkpoint/detail/atomic_file.h"
#include "checkpoint/detail/checkpoint_file.h"
#include "checkpoint/detail/fault_injection.h"
#include "checkpoint/detail/file_lock.h"
#include "checkpoint/detail/note.h"
#include "checkpoint/detail/rank_zero.h"
#include "rankwise/error.h"
#include "rankwise/process_group.h"

namespace rankwise {
namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kLockFile = "rankwise.lock";
constexpr const char* kSuffix = ".pt";
constexpr int kStepDigits = 10;

// File names in `dir`.
std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  if (!handle) return names;
  while (const dirent* entry = ::readdir(handle)) names.emplace_back(entry->d_name);
  ::closedir(handle);
  return names;
}

// The step of "<prefix>-<digits>.pt", or -1.
int64_t step_of(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "-";
  if (name.size() != head.size() + kStepDigits + std::strlen(kSuffix) ||
      name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(head.size(), kStepDigits);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

}  // namespace

CheckpointManager::CheckpointManager(CheckpointManagerOptions options)
    : options_(std::move(options)) {
  if (options_.directory().empty()) {
    throw ConfigError("rankwise: CheckpointManager needs a directory (CheckpointManagerOptions(dir))");
  }
  if (options_.keep_last() < 1) {
    throw ConfigError("rankwise: CheckpointManager keep_last is " +
                      std::to_string(options_.keep_last()) + "; it must be at least 1");
  }
  if (options_.every_n_steps() < 0) {
    throw ConfigError("rankwise: CheckpointManager every_n_steps is " +
                      std::to_string(options_.every_n_steps()) + "; use 0 (off) or a positive count");
  }
  if (options_.prefix().empty() || options_.prefix().find('/') != std::string::npos) {
    throw ConfigError("rankwise: CheckpointManager prefix '" + options_.prefix() +
                      "' must be a non-empty file name without '/'");
  }
  const std::string& dir = options_.directory();
  detail::on_rank_zero(
      [&] {
        std::error_code error;
        std::filesystem::create_directories(dir, error);
        if (error || !std::filesystem::is_directory(dir)) {
          throw CheckpointError("rankwise: cannot create the checkpoint directory '" + dir +
                                "': " + (error ? error.message() : "a file of that name exists") +
                                ". Choose a writable location");
        }
        lock_ = std::make_unique<detail::FileLock>(dir + "/" + kLockFile,
                                                   "checkpoint directory '" + dir + "'");
        // Holding the lock, nobody else writes here: temporary files are leftovers
        // of a writer that was killed.
        for (const auto& name : list_directory(dir)) {
          if (name.find(".tmp.") != std::string::npos) ::unlink((dir + "/" + name).c_str());
        }
      },
      "opening the checkpoint directory on rank 0");
}

CheckpointManager::~CheckpointManager() = default;

bool CheckpointManager::should_save(int64_t step, bool epoch_end) const {
  if (epoch_end && options_.at_epoch_end()) return true;
  return options_.every_n_steps() > 0 && step > 0 && step % options_.every_n_steps() == 0;
}

std::string CheckpointManager::path_for(int64_t step) const {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%0*lld", kStepDigits, static_cast<long long>(step));
  return options_.directory() + "/" + options_.prefix() + "-" + digits + kSuffix;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& name : list_directory(options_.directory())) {
    const int64_t step = step_of(name, options_.prefix());
    if (step >= 0) found.emplace_back(step, options_.directory() + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& entry : found) paths.push_back(std::move(entry.second));
  return paths;
}

std::string CheckpointManager::save(const Checkpoint& state, int64_t step) {
  if (step < 0) {
    throw ConfigError("rankwise: CheckpointManager::save step is " + std::to_string(step) +
                      "; it must be >= 0");
  }
  const std::string path = path_for(step);
  detail::on_rank_zero(
      [&] {
        if (!lock_) {
          throw CheckpointError("rankwise: internal error: rank 0 does not hold the lock of '" +
                                options_.directory() + "'");
        }
        detail::write_checkpoint_file(c10::IValue(state.dict()), path);
        detail::fault_at("before-latest");
        const std::string name = path.substr(path.find_last_of('/') + 1) + "\n";
        detail::write_file_atomically(options_.directory() + "/" + kLatest, name.data(), name.size());
        detail::fault_at("before-prune");
        auto all = checkpoints();
        const auto keep = static_cast<std::size_t>(options_.keep_last());
        for (std::size_t i = 0; i + keep < all.size(); ++i) {
          if (all[i] != path) ::unlink(all[i].c_str());
        }
      },
      "the save by rank 0");
  return path;
}

namespace {

// Throws CheckpointError unless `path` verifies against its recorded checksum
// (every file the manager writes has one; a file without it was truncated).
[[noreturn]] void no_checksum(const std::string& path) {
  throw CheckpointError("rankwise: checkpoint '" + path +
                        "' has no checksum record (truncated, or not written by rankwise)");
}

void verify_managed(const std::string& path) {
  if (!verify(path)) no_checksum(path);
}

std::string reason(const std::exception& e) {
  std::string text = e.what();
  const std::string prefix = "rankwise: ";
  if (text.compare(0, prefix.size(), prefix) == 0) text.erase(0, prefix.size());
  return text;
}

}  // namespace

std::optional<std::string> CheckpointManager::newest_usable(
    const std::function<void(const std::string&)>& use) const {
  const std::string& dir = options_.directory();
  std::string named;
  std::string pointer_problem;
  if (::access((dir + "/" + kLatest).c_str(), F_OK) == 0) {
    try {
      named = detail::read_file(dir + "/" + kLatest);
      while (!named.empty() && (named.back() == '\n' || named.back() == ' ')) named.pop_back();
      if (step_of(named, options_.prefix()) < 0) {
        pointer_problem = "'" + dir + "/latest' does not name a checkpoint of this directory";
      } else {
        use(dir + "/" + named);
        return dir + "/" + named;
      }
    } catch (const CheckpointError& e) {
      pointer_problem = reason(e);
    }
  }
  auto all = checkpoints();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!named.empty() && *it == dir + "/" + named) continue;
    try {
      use(*it);
    } catch (const CheckpointError& e) {
      detail::note("rankwise: skipping an unusable checkpoint: " + reason(e));
      continue;
    }
    if (!pointer_problem.empty()) {
      detail::note("rankwise: the latest checkpoint is unusable (" + pointer_problem + "); using " + *it +
           ", the newest one that verifies");
    }
    return *it;
  }
  if (!pointer_problem.empty() || !all.empty()) {
    throw CheckpointError("rankwise: no usable checkpoint in '" + dir + "': " +
                          (pointer_problem.empty() ? std::string("none of its ") +
                                                         std::to_string(all.size()) +
                                                         " checkpoint files verifies"
                                                   : pointer_problem +
                                                         ", and no other checkpoint file verifies") +
                          ". Move the directory aside to start afresh");
  }
  return std::nullopt;
}

std::optional<std::string> CheckpointManager::latest() const {
  return newest_usable(verify_managed);
}

void CheckpointManager::clear() {
  detail::on_rank_zero(
      [&] {
        for (const auto& path : checkpoints()) ::unlink(path.c_str());
        ::unlink((options_.directory() + "/" + kLatest).c_str());
      },
      "clearing the checkpoint directory on rank 0");
}

std::optional<Checkpoint> CheckpointManager::load_latest(std::string* path) const {
  // Loading verifies the checksum, so each candidate is read once.
  std::optional<Checkpoint> loaded;
  auto found = newest_usable([&](const std::string& candidate) {
    detail::Integrity integrity;
    c10::IValue value = detail::read_checkpoint_file(candidate, &integrity);
    if (integrity != detail::Integrity::kVerified) no_checksum(candidate);
    loaded = detail::checkpoint_from(value, candidate);
  });
  if (!found) return std::nullopt;
  if (path) *path = *found;
  return loaded;
}

std::optional<Checkpoint> CheckpointManager::load_latest_collective(
    std::string* path, CollectiveLoadOptions options) const {
  auto file = detail::read_agreed([this] { return latest(); }, options);
  if (!file) return std::nullopt;
  if (path) *path = file->path;
  return detail::checkpoint_from(file->value, file->path);
}

}  // namespace rankwise
