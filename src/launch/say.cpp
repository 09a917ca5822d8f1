#include "launch/say.h"

#include "launch/output_merger.h"

namespace rankwise {
namespace launch {

void say(const std::string& text) { write_all(2, "rankwise-run: " + text + "\n"); }

}  // namespace launch
}  // namespace rankwise
