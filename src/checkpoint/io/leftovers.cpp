#include "checkpoint/io/leftovers.h"

#include "core/check.h"

#include <filesystem>
#include <system_error>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/io/note.h"
#include "checkpoint/io/file_lock.h"
#include "util/io.h"
#include "util/text.h"

namespace rankwise::checkpoint::io {

namespace {

// "<base><marker><digits>.XXXXXX" (AtomicFile) when `pid`, else "<base><marker>XXXXXX" (mkdtemp).
bool named_like(const std::string& name, const std::string& base, const std::string& marker, bool pid) {
  const std::string prefix = base + marker;
  if (name.rfind(prefix, 0) != 0) return false;
  std::string rest = name.substr(prefix.size());
  if (pid) {
    const auto dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos ||
        rest.find_first_not_of("0123456789") != dot) {
      return false;
    }
    rest = rest.substr(dot + 1);
  }
  return rest.size() == 6 && rest.find('/') == std::string::npos;
}

}  // namespace

std::vector<std::string> remove_leftovers_of(const std::string& path) {
  const std::string base = std::filesystem::path(path).filename().string();
  const std::filesystem::path parent = directory_of(path);
  std::vector<std::string> removed;
  if (base.empty()) return removed;
  for (const auto& name : util::list_directory(parent.string())) {
    std::error_code error;
    const auto status = std::filesystem::symlink_status(parent / name, error);
    if (error) continue;
    const bool file = std::filesystem::is_regular_file(status) || std::filesystem::is_symlink(status);
    const bool leftover = (file && named_like(name, base, ".tmp.", true)) ||
                          (std::filesystem::is_directory(status) && named_like(name, base, ".rankwise-tmp.", false));
    if (!leftover) continue;
    std::filesystem::remove_all(parent / name, error);
    if (!error) removed.push_back(name);
  }
  return removed;
}

void remove_leftovers_with_note(const std::string& path, const std::string& who, bool holds_directory_lock) {
  std::error_code error;
  if (!holds_directory_lock && std::filesystem::exists(std::filesystem::path(directory_of(path)) / kDirectoryLockFile, error)) {
    return;
  }
  const auto removed = remove_leftovers_of(path);
  if (removed.empty()) return;
  note(core::message("note: {}('{}'): removed what an interrupted save left beside it: {}", who,
                     path, util::join_strings(removed)));
}

}  // namespace rankwise::checkpoint::io
