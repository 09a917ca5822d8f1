#include "rankwise/log.h"

#include <unistd.h>

#include <cstdio>

#include "core/process_env.h"
#include "util/io.h"

namespace rankwise {

void print_line(const std::string& line) {
  std::fflush(stdout);  // keep order with anything the program wrote via stdio
  util::write_line(STDOUT_FILENO, line);
}

bool is_rank_zero() { return core::process_env().rank == 0; }

}  // namespace rankwise
