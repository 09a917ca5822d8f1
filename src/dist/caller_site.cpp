#include "dist/caller_site.h"

#include <cstring>
#include <string_view>

#include "rankwise/dist/process_group.h"

namespace rankwise::dist {
namespace {

thread_local std::optional<std::source_location> caller_site;
thread_local std::optional<std::source_location> loop_site;

// The repository's root as this file's path shows it: "rankwise/", as
// CMakeLists.txt maps it ("" when relative).
std::string_view source_root() {
  constexpr std::string_view self = __FILE__;
  constexpr std::string_view tail = "src/dist/caller_site.cpp";
  return self.size() >= tail.size() ? self.substr(0, self.size() - tail.size()) : std::string_view();
}

// A line of rankwise's own sources or public headers, not a user's.
bool inside_rankwise(const char* file) {
  const std::string_view path = file;
  const std::string_view root = source_root();
  if (root.empty() || path.substr(0, root.size()) != root) return false;
  const std::string_view rest = path.substr(root.size());
  return rest.starts_with("src/") || rest.starts_with("include/rankwise/");
}

}  // namespace

CallerSite::CallerSite(const std::source_location& site) : outermost_(!caller_site) {
  if (outermost_) caller_site = site;
}

CallerSite::~CallerSite() {
  if (outermost_) caller_site.reset();
}

std::source_location CallerSite::reported(const std::source_location& own) {
  if (caller_site) return *caller_site;
  if (loop_site && inside_rankwise(own.file_name())) return *loop_site;
  return own;
}

void set_loop_site(const std::optional<std::source_location>& site) { loop_site = site; }

}  // namespace rankwise::dist
