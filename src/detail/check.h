#pragma once
// RANKWISE_CHECK: the one way a precondition becomes a rankwise error, like
// TORCH_CHECK_VALUE(cond, ...) and gloo's GLOO_ENFORCE_EQ:
//
//   RANKWISE_CHECK(root >= 0 && root < size, ConfigError,
//                  "rankwise: {}: root {} is not a rank in [0, {})", where(), root, size);
//
// throws ErrorType(fmt::format(format, args...)) when `cond` is false. The
// arguments are formatted only then. ErrorType is one of the exceptions of
// rankwise/error.h; the message follows the house style: "rankwise: rank r/W"
// (detail::where()), the operation, what was wrong, and what to do.
#include <fmt/format.h>

#include "rankwise/error.h"

#define RANKWISE_CHECK(cond, ErrorType, ...)               \
  do {                                                     \
    if (!(cond)) [[unlikely]] {                            \
      throw ErrorType(::fmt::format(__VA_ARGS__));         \
    }                                                      \
  } while (false)
