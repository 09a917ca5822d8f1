#pragma once
// The one way rankwise raises an error. Every message starts "rankwise: ",
// then "rank r/W: " when it concerns one rank of a job, then the operation,
// what was wrong and what to do (docs/architecture.md, "Errors"):
//
//   core::raise<ConfigError>(core::here(), "unknown backend '{}'; use \"gloo\"", name);
//   RANKWISE_CHECK(root >= 0 && root < size, ConfigError, core::at(group),
//                  "broadcast: root {} is not a rank in [0, {})", root, size);
//
// The prefix, the rank label and the formatting (fmt) happen here only.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "rankwise/error.h"

namespace rankwise::core {

/// Which rank of how many a message is about: "rank r/W".
struct At {
  int rank = 0;
  int world_size = 1;
};

/// The rank and size of a process group (anything with rank() and world_size()).
template <typename Group>
At at(const Group& group) {
  return {group.rank(), group.world_size()};
}

/// This process: the default process group's rank and size once dist::init()
/// made one, else the launch environment's. Throws ConfigError as
/// LaunchEnv::from_environment() does when the environment is malformed.
At here();

/// "rank r/W".
std::string where(At at);

/// How every message starts.
inline constexpr std::string_view kMessagePrefix = "rankwise: ";

/// The inverse of message(): `text` without its leading "rankwise: " and,
/// given `at`, "rank r/W: " (in either order), for a message that quotes another.
std::string unprefixed(std::string text);
std::string unprefixed(std::string text, At at);

/// "rankwise: " + fmt::format(format, args...).
template <typename... Args>
std::string message(fmt::format_string<Args...> format, Args&&... args) {
  return std::string(kMessagePrefix) + fmt::format(format, std::forward<Args>(args)...);
}

/// "rankwise: rank r/W: " + fmt::format(format, args...).
template <typename... Args>
std::string message(At at, fmt::format_string<Args...> format, Args&&... args) {
  return std::string(kMessagePrefix) + where(at) + ": " +
         fmt::format(format, std::forward<Args>(args)...);
}

/// Throws ErrorType (an exception of rankwise/error.h) with message(...).
template <typename ErrorType, typename... Args>
[[noreturn]] void raise(fmt::format_string<Args...> format, Args&&... args) {
  throw ErrorType(message(format, std::forward<Args>(args)...));
}

/// Throws ErrorType with message(at, ...).
template <typename ErrorType, typename... Args>
[[noreturn]] void raise(At at, fmt::format_string<Args...> format, Args&&... args) {
  throw ErrorType(message(at, format, std::forward<Args>(args)...));
}

}  // namespace rankwise::core

/// Throws ErrorType through core::raise(...) when `cond` is false; the
/// arguments (an optional core::At, a fmt format, its values) are evaluated
/// only then.
#define RANKWISE_CHECK(cond, ErrorType, ...)           \
  do {                                                 \
    if (!(cond)) [[unlikely]] {                        \
      ::rankwise::core::raise<ErrorType>(__VA_ARGS__); \
    }                                                  \
  } while (false)
