#include "wire/store_keys.h"

#include <fmt/format.h>

#include "util/text.h"

namespace rankwise::wire {

std::string job_prefix(const std::string& job_key) {
  return "rankwise/" + (job_key.empty() ? "" : job_key + "/");
}

std::string attempt_prefix(int restart_count, const std::string& job_key) {
  return job_prefix(job_key) + std::to_string(restart_count);
}

std::string progress_key(int rank) { return fmt::format("progress/{}", rank); }

}  // namespace rankwise::wire
