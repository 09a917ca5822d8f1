#include "checkpoint/managers/numbered_checkpoints.h"
#include "util/io.h"

#include "core/check.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/io/note.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::managers {
namespace {

constexpr const char* kLatest = "latest";
constexpr int kStepDigits = 10;

}  // namespace

std::string reason_of(const std::exception& e) {
  std::string text = core::unprefixed(e.what());
  // A file's own advice (to load an earlier checkpoint) is the directory's
  // to give: it says which one, or that none verifies.
  for (const char* advice : {"; do not use it: load the previous checkpoint",
                             ". The checkpoint is damaged; load an earlier one"}) {
    const auto at = text.find(advice);
    if (at != std::string::npos) text.erase(at, std::string(advice).size());
  }
  return text;
}

NumberedCheckpoints::NumberedCheckpoints(std::string directory, std::string prefix, std::string suffix)
    : directory_(std::move(directory)), prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

std::string NumberedCheckpoints::path_for(int64_t step) const {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%0*lld", kStepDigits, static_cast<long long>(step));
  return directory_ + "/" + prefix_ + "-" + digits + suffix_;
}

int64_t NumberedCheckpoints::step_of(const std::string& name) const {
  const std::string head = prefix_ + "-";
  if (name.size() != head.size() + kStepDigits + suffix_.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - suffix_.size(), std::string::npos, suffix_) != 0) {
    return -1;
  }
  const std::string digits = name.substr(head.size(), kStepDigits);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

std::vector<std::string> NumberedCheckpoints::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& name : util::list_directory(directory_)) {
    const int64_t step = step_of(name);
    if (step >= 0) found.emplace_back(step, directory_ + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& entry : found) paths.push_back(std::move(entry.second));
  return paths;
}

void NumberedCheckpoints::point_latest_to(const std::string& path) const {
  const std::string name = path.substr(path.find_last_of('/') + 1) + "\n";
  io::write_file_atomically(directory_ + "/" + kLatest, name.data(), name.size());
}

void NumberedCheckpoints::remove_latest() const { ::unlink((directory_ + "/" + kLatest).c_str()); }

std::optional<std::string> NumberedCheckpoints::newest_usable(
    const std::function<void(const std::string&)>& use) const {
  const std::string& dir = directory_;
  std::string named;
  std::string pointer_problem;
  const bool pointer_missing = ::access((dir + "/" + kLatest).c_str(), F_OK) != 0;
  if (!pointer_missing) {
    try {
      named = io::read_file(dir + "/" + kLatest);
      while (!named.empty() && (named.back() == '\n' || named.back() == ' ')) named.pop_back();
      if (step_of(named) < 0) {
        pointer_problem = fmt::format("'{}/latest' does not name a checkpoint of this directory", dir);
      } else {
        use(dir + "/" + named);
        return dir + "/" + named;
      }
    } catch (const CheckpointError& e) {
      pointer_problem = reason_of(e);
    }
  }
  auto all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!named.empty() && *it == dir + "/" + named) continue;
    try {
      use(*it);
    } catch (const CheckpointError& e) {
      io::note(core::message("skipping an unusable checkpoint: {}", reason_of(e)));
      continue;
    }
    if (!pointer_problem.empty()) {
      io::note(core::message("the latest checkpoint is unusable ({}); using {}, the newest one that verifies",
                             pointer_problem, *it));
    } else if (pointer_missing) {
      io::note(core::message("'{}/latest' is missing; using {}, the newest checkpoint that verifies", dir, *it));
    }
    return *it;
  }
  if (!pointer_problem.empty() || !all.empty()) {
    // Files for CheckpointManager, directories for ShardedCheckpointManager.
    const bool files = !suffix_.empty();
    const std::string problem =
        pointer_problem.empty()
            ? fmt::format("none of its {} {} verifies", all.size(), files ? "checkpoint files" : "checkpoint directories")
            : fmt::format("{}, and no other {} verifies", pointer_problem, files ? "checkpoint file" : "checkpoint directory");
    core::raise<CheckpointError>(
        "no usable checkpoint in '{}': {}. Move the directory aside to start afresh", dir, problem);
  }
  return std::nullopt;
}

}  // namespace rankwise::checkpoint::managers
