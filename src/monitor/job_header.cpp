#include "rankwise/monitor/job_header.h"

#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "rankwise/device.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "util/crc32.h"
#include "util/host_name.h"

namespace rankwise::monitor {

namespace {

// Bytes per rank in print_header's all_gather: "rank\tlocal\thost\tpid\tdevice\tphysical".
constexpr std::size_t kHeaderInfoBytes = 256;

std::vector<std::string> split_tabs(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = s.find('\t', start);
    parts.push_back(s.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return parts;
    start = tab + 1;
  }
}

std::string header_rank_line(const std::string& info) {
  auto f = split_tabs(info);
  f.resize(6, "?");
  return fmt::format("  rank {} | local rank {} | host {} | pid {} | device {} | physical GPU {}",
                     f[0], f[1], f[2], f[3], f[4], f[5]);
}

}  // namespace

void print_header() {
  const bool cuda = torch::cuda::is_available();
  const auto gpus = cuda ? torch::cuda::device_count() : 0;
  std::string backend = dist::is_initialized() ? dist::process_group().backend() : "none";
  rankwise::print0(
      "rankwise {} | libtorch {} | CUDA available: {} | GPUs visible: {} | CRC-32: {} | "
      "world size: {} | backend: {}",
      RANKWISE_VERSION, TORCH_VERSION, cuda ? "yes" : "no", gpus, util::crc32_implementation(),
      dist::world_size(), backend);

  // This rank's line; a bad CUDA_VISIBLE_DEVICES must not make this rank skip
  // the all_gather below (the others would wait for it), so it is shown as "?".
  std::string device = "?", physical = "?";
  try {
    const DeviceAssignment a = device_assignment();
    device = a.device_string();
    physical = a.physical;
  } catch (const Error&) {
  }
  const LaunchEnv env = dist::is_initialized() ? dist::process_group().env() : LaunchEnv::from_environment();
  std::string info = fmt::format("{}\t{}\t{}\t{}\t{}\t{}", dist::rank(), env.local_rank, util::host_name(),
                                 ::getpid(), device, physical);
  info.resize(std::min(info.size(), kHeaderInfoBytes - 1));  // keeps a terminating 0

  std::vector<std::string> infos;
  if (dist::is_initialized()) {
    auto buffer = torch::zeros({static_cast<int64_t>(kHeaderInfoBytes)}, torch::kUInt8);
    std::memcpy(buffer.data_ptr<uint8_t>(), info.data(), info.size());
    for (const auto& t : dist::process_group().all_gather(buffer)) {
      infos.emplace_back(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()));
    }
  } else {
    infos.push_back(info);
  }
  if (!rankwise::is_rank_zero()) return;
  for (const auto& i : infos) rankwise::print_line(header_rank_line(i));
}

}  // namespace rankwise::monitor
