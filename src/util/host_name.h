#pragma once
// This machine's host name, as messages and records name it.
#include <string>

namespace rankwise::util {

/// gethostname(2), or "?" when it fails.
std::string host_name();

}  // namespace rankwise::util
