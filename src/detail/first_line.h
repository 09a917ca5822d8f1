#pragma once
// The first line of a library's message (c10d's store errors run on with
// C++ stack traces), for a one-line rankwise message that quotes it.
#include <exception>
#include <string>

namespace rankwise {
namespace detail {

/// `text` up to its first newline.
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// The first line of `e.what()`.
inline std::string first_line(const std::exception& e) { return first_line(std::string(e.what())); }

}  // namespace detail
}  // namespace rankwise
