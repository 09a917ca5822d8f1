#include "rankwise/monitor/tensorboard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/check.h"
#include "monitor/record_file.h"
#include "monitor/tensorboard_event.h"
#include "rankwise/error.h"
#include "rankwise/log.h"
#include "util/crc32.h"
#include "util/host_name.h"

namespace rankwise::monitor {
namespace {

// TFRecord's masked CRC-32C: rotated right by 15 bits, plus a constant.
uint32_t masked_crc32c(const void* data, std::size_t size) {
  const uint32_t crc = util::crc32c_update(0, data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

// `data` as one TFRecord: uint64 length, masked CRC-32C of those 8 bytes,
// data, masked CRC-32C of the data (all little-endian).
std::string tfrecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(std::string directory) : directory_(std::move(directory)) {
  if (!is_rank_zero()) return;
  RANKWISE_CHECK(!directory_.empty(), ConfigError,
                 "tensorboard: the event directory is empty; give one (e.g. runs/train), or no "
                 "tensorboard_dir for no event file");
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  RANKWISE_CHECK(!error, ConfigError,
                 "tensorboard: cannot create the event directory '{}': {}; choose a writable place",
                 directory_, error.message());
  const std::string base = fmt::format("{}/events.out.tfevents.{}.{}.{}", directory_,
                                       static_cast<long long>(std::time(nullptr)), util::host_name(), ::getpid());
  // A new file, never an existing one (a second writer in this process within
  // the same second gets the next free suffix).
  int fd = -1;
  for (int n = 1;; ++n) {
    path_ = n == 1 ? base : fmt::format("{}.{}", base, n);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST || n == 1000) break;
  }
  RANKWISE_CHECK(fd >= 0, ConfigError,
                 "tensorboard: cannot create an event file in the directory '{}' ({}): {}; check that "
                 "it is a writable directory, or choose another",
                 directory_, path_, std::strerror(errno));
  file_ = std::make_unique<RecordFile>(fd, path_);
  file_->append(tfrecord(serialize_file_version_event(unix_now())));
}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                   std::optional<double> wall_time) {
  add_scalars(step, {{tag, value}}, wall_time);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                    std::optional<double> wall_time) {
  if (!writing() || values.empty()) return;
  file_->append(tfrecord(serialize_scalars_event(wall_time ? *wall_time : unix_now(), step, values)));
}

bool TensorBoardWriter::writing() const { return file_ && file_->is_open(); }

const std::string& TensorBoardWriter::directory() const { return directory_; }

const std::string& TensorBoardWriter::path() const { return path_; }

}  // namespace rankwise::monitor
