#include "rankwise/log.h"

#include <torch/cuda.h>
#include <torch/version.h>
#include <unistd.h>

#include <cerrno>

#include "rankwise/process_group.h"

namespace rankwise {

void print_line(const std::string& line) {
  std::fflush(stdout);  // keep order with anything the program wrote via stdio
  std::string data = line + "\n";
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

bool is_rank_zero() { return rank() == 0; }

void print_header() {
  const bool cuda = torch::cuda::is_available();
  const auto gpus = cuda ? torch::cuda::device_count() : 0;
  std::string backend = is_initialized() ? process_group().backend() : "none";
  print0("rankwise {} | libtorch {} | CUDA available: {} | GPUs visible: {} | world size: {} | "
         "backend: {}",
         RANKWISE_VERSION, TORCH_VERSION, cuda ? "yes" : "no", gpus, world_size(), backend);
}

}  // namespace rankwise
