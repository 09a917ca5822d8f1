#include "checkpoint/detail/note.h"

#include <iostream>

#include "rankwise/process_group.h"

namespace rankwise::detail {

void note(const std::string& text) {
  if (!is_initialized() || rank() == 0) std::cerr << text << "\n";
}

}  // namespace rankwise::detail
