#include "util/visible_devices.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace rankwise::util {
namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

bool all_of(const std::string& s, std::size_t from, bool (*ok)(unsigned char)) {
  return from < s.size() &&
         std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(),
                     [ok](char c) { return ok(static_cast<unsigned char>(c)); });
}

bool is_digit(unsigned char c) { return std::isdigit(c) != 0; }
bool is_uuid_char(unsigned char c) { return std::isxdigit(c) != 0 || c == '-'; }
// MIG names: "MIG-<uuid>" or "MIG-GPU-<uuid>/<gi>/<ci>".
bool is_mig_char(unsigned char c) { return std::isalnum(c) != 0 || c == '-' || c == '/'; }

// Empty when `e` is a valid entry, else why not.
std::string entry_problem(const std::string& e) {
  if (e.empty()) return "an empty entry";
  if (e.rfind("GPU-", 0) == 0) {
    return all_of(e, 4, is_uuid_char) ? "" : "a GPU UUID must be GPU- followed by hex digits";
  }
  if (e.rfind("MIG-", 0) == 0) {
    return all_of(e, 4, is_mig_char) ? ""
                                     : "a MIG name must be MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>";
  }
  if (all_of(e, 0, is_digit)) return "";
  return "not a device index, GPU-<uuid> or MIG-<uuid>";
}

// What makes two entries the same GPU: indices by value ("01" is 1), UUIDs as written.
std::string identity(const std::string& entry) {
  if (!all_of(entry, 0, is_digit)) return entry;
  return entry.substr(std::min(entry.find_first_not_of('0'), entry.size() - 1));
}

}  // namespace

std::optional<std::vector<std::string>> parse_visible_devices(const std::optional<std::string>& value) {
  if (!value) return std::nullopt;
  const std::string whole = trim(*value);
  if (whole.empty() || whole == "-1") return std::vector<std::string>{};
  std::vector<std::string> entries;
  for (std::size_t start = 0, comma = 0; comma != std::string::npos; start = comma + 1) {
    comma = whole.find(',', start);
    const std::string entry =
        trim(whole.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const std::string problem = entry_problem(entry);
    if (!problem.empty()) {
      throw std::invalid_argument("entry " + std::to_string(entries.size() + 1) + " ('" + entry + "') is " + problem);
    }
    for (const auto& seen : entries) {
      if (identity(seen) == identity(entry)) {
        throw std::invalid_argument("entry '" + entry + "' repeats '" + seen + "'; each GPU may appear once");
      }
    }
    entries.push_back(entry);
  }
  return entries;
}

}  // namespace rankwise::util
