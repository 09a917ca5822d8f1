#include "launch/output/say.h"

#include "launch/output/output_merger.h"

namespace rankwise::launch::output {

void say(const std::string& text) { write_all(2, "rankwise-run: " + text + "\n"); }

}  // namespace rankwise::launch::output
