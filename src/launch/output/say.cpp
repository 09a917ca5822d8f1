#include "launch/output/say.h"

#include <fmt/format.h>

#include "launch/output/output_merger.h"

namespace rankwise::launch::output {

void say(const std::string& text) { write_all(2, fmt::format("rankwise-run: {}\n", text)); }

}  // namespace rankwise::launch::output
