#include "checkpoint/detail/leftovers.h"

#include <filesystem>
#include <system_error>

#include "checkpoint/detail/note.h"
#include "checkpoint/detail/numbered_checkpoints.h"
#include "detail/join.h"

namespace rankwise::detail {

std::vector<std::string> remove_leftovers_of(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string base = target.filename().string();
  const std::filesystem::path parent = target.has_parent_path() ? target.parent_path() : ".";
  std::vector<std::string> removed;
  if (base.empty()) return removed;
  for (const auto& name : list_directory(parent.string())) {
    const bool leftover = name.rfind(base + ".tmp.", 0) == 0 || name.rfind(base + ".rankwise-tmp.", 0) == 0;
    if (!leftover) continue;
    std::error_code error;
    std::filesystem::remove_all(parent / name, error);
    if (!error) removed.push_back(name);
  }
  return removed;
}

void remove_leftovers_with_note(const std::string& path, const std::string& who) {
  const auto removed = remove_leftovers_of(path);
  if (removed.empty()) return;
  note("rankwise: note: " + who + "('" + path + "'): removed what an interrupted save left beside it: " +
       join_list(removed));
}

}  // namespace rankwise::detail
