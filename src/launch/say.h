#pragma once
/// \file say.h
/// The launcher's own lines: "rankwise-run: <text>" on stderr, written whole.

#include <string>

namespace rankwise {
namespace launch {

/// Writes "rankwise-run: `text`\n" to stderr in one write.
void say(const std::string& text);

}  // namespace launch
}  // namespace rankwise
