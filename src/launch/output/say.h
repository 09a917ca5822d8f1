#pragma once
/// \file say.h
/// The launcher's own lines: "rankwise-run: <text>" on stderr, written whole.

#include <string>

namespace rankwise::launch::output {

/// Writes "rankwise-run: `text`\n" to stderr in one write.
void say(const std::string& text);

}  // namespace rankwise::launch::output
