#include "launch/workers/visible_devices.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

namespace rankwise::launch::workers {

int cpu_core_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

namespace {

int count_driver_gpus(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return 0;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// One CUDA_VISIBLE_DEVICES entry: an index, or a GPU-/MIG- UUID.
bool valid_entry(const std::string& e, int physical) {
  if (e.rfind("GPU-", 0) == 0 || e.rfind("MIG-", 0) == 0) return true;
  if (e.empty() || !std::all_of(e.begin(), e.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return false;
  }
  return std::stol(e.substr(0, 9)) < physical;
}

}  // namespace

int visible_gpu_count(const std::optional<std::string>& cuda_visible_devices,
                      const std::string& proc_gpus_dir) {
  const int physical = count_driver_gpus(proc_gpus_dir);
  if (physical == 0 || !cuda_visible_devices) return physical;
  int n = 0;
  std::stringstream ss(*cuda_visible_devices);
  std::string entry;
  while (std::getline(ss, entry, ',')) {
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    if (!valid_entry(entry, physical)) break;
    ++n;
  }
  return std::min(n, physical);
}

}  // namespace rankwise::launch::workers
