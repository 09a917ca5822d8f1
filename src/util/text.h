#pragma once
// Text for messages: "a, b, c" lists (missing keys, ranks that
// differ, ...), joined in one place; comma-separated lists split in one.
#include <exception>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rankwise::util {

/// The entries of a comma-separated list, in order; empty entries are kept
/// ("a,,b" has three, "" has one), so the caller rejects them by name.
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> names;
  for (std::size_t start = 0, comma = 0; comma != std::string::npos; start = comma + 1) {
    comma = list.find(',', start);
    const std::size_t length = comma == std::string::npos ? std::string::npos : comma - start;
    names.push_back(list.substr(start, length));
  }
  return names;
}

/// The items in order, `separator` between two; numbers through
/// std::to_string, anything else as std::string. "" for no items.
template <typename Range>
std::string join_strings(const Range& items, std::string_view separator = ", ") {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    first = false;
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(item)>>) {
      out += std::to_string(item);
    } else {
      out += item;
    }
  }
  return out;
}

/// "rank 3" or "ranks 1, 2": a list of ranks as messages name it.
template <typename Ranks>
std::string rank_list(const Ranks& ranks) {
  return (std::size(ranks) == 1 ? "rank " : "ranks ") + join_strings(ranks);
}

/// `text` up to its first newline: the first line of a library's message
/// (c10d's store errors run on with C++ stack traces), for a one-line
/// rankwise message that quotes it.
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// The first line of `e.what()`.
inline std::string first_line(const std::exception& e) { return first_line(std::string(e.what())); }

}  // namespace rankwise::util
