#include "checkpoint/io/note.h"

#include <iostream>

#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint::io {

void note(const std::string& text) {
  if (!dist::is_initialized() || dist::rank() == 0) std::cerr << text << "\n";
}

}  // namespace rankwise::checkpoint::io
