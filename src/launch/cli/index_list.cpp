#include "launch/cli/index_list.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/text.h"
#include "launch/options.h"

namespace rankwise::launch::cli {

std::optional<long> decimal(const std::string& text) {
  const char* kSpace = " \t\n\r\f\v";
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string::npos) return std::nullopt;
  std::string digits = text.substr(first, text.find_last_not_of(kSpace) - first + 1);
  const bool negative = digits[0] == '-';
  if (digits[0] == '+' || digits[0] == '-') digits.erase(0, 1);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const long value = std::stol(digits);
  return negative ? -value : value;
}

std::vector<int> parse_index_list(const std::string& text, const std::string& flag,
                                  const std::string& what, int bound,
                                  const std::string& bound_note) {
  std::vector<int> indices;
  // The same splitting as --iface: empty entries are kept, to be named.
  for (const std::string& item : rankwise::util::split_list(text)) {
    const auto index = decimal(item);
    if (!index || *index < 0 || *index >= bound) {
      throw UsageError(fmt::format(
          "{} '{}': '{}' is not a {} in [0, {}){}; give a comma-separated list such as {} 0,1",
          flag, text, item, what, bound, bound_note.empty() ? "" : fmt::format(" ({})", bound_note),
          flag));
    }
    const int i = static_cast<int>(*index);
    if (std::find(indices.begin(), indices.end(), i) == indices.end()) indices.push_back(i);
  }
  return indices;
}

}  // namespace rankwise::launch::cli
