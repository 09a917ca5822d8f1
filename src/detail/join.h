#pragma once
// "a, b, c": the items of a list in a message (missing keys, ranks that
// differ, ...), joined in one place.
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

namespace rankwise {
namespace detail {

/// The items in order, `separator` between two; numbers through
/// std::to_string, anything else as std::string. "" for no items.
template <typename Range>
std::string join_list(const Range& items, std::string_view separator = ", ") {
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
  return (std::size(ranks) == 1 ? "rank " : "ranks ") + join_list(ranks);
}

}  // namespace detail
}  // namespace rankwise
