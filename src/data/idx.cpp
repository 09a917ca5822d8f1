#include "rankwise/data/idx.h"

#include "core/check.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>

#include "util/text.h"
#include "rankwise/error.h"

namespace rankwise::data {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 34;  // 16 GiB of data: no real IDX file is larger

class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {}
  ~GzReader() {
    if (file_) gzclose(file_);
  }
  bool ok() const { return file_ != nullptr; }
  // True when the file is gzip-compressed (zlib reads plain files as they are).
  bool gzipped() const { return gzdirect(file_) == 0; }
  // Reads exactly n bytes or throws naming what was expected.
  void read(void* out, std::size_t n, const std::string& what) {
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      int got = gzread(file_, static_cast<char*>(out) + done, chunk);
      if (got <= 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        core::raise<ConfigError>(
            "IDX file '{}' is truncated or corrupt while reading {} ({} of {} bytes{}). "
            "Re-download or reinstall it",
            path_, what, done, n,
            (code != Z_OK && message ? std::string(", zlib: ") + message : ""));
      }
      done += static_cast<std::size_t>(got);
    }
  }

 private:
  std::string path_;
  gzFile file_;
};

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    core::raise<ConfigError>("IDX file '{}' does not exist", path);
  }
  GzReader in(path);
  if (!in.ok()) core::raise<ConfigError>("cannot open IDX file '{}'", path);
  unsigned char magic[4];
  in.read(magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    core::raise<ConfigError>(
        "'{}' is not an IDX file of unsigned bytes (bad magic number); expected the "
        "MNIST/Fashion-MNIST format",
        path);
  }
  std::vector<int64_t> dims(magic[3]);
  for (auto& d : dims) {
    unsigned char b[4];
    in.read(b, 4, "the header");
    d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
  }
  const std::string shape = util::join_strings(dims, "x");  // "60000x28x28"
  // The product of the dimensions, zeros counted as ones: libtorch refuses
  // sizes whose product overflows even when one of them is 0.
  int64_t product = 1;
  for (const int64_t d : dims) {
    if (product > kMaxBytes / std::max<int64_t>(d, 1)) {  // product * d > kMaxBytes, no overflow
      core::raise<ConfigError>(
          "IDX file '{}' declares dimensions {}, more than 2^34 bytes: the file is corrupt. "
          "Re-download or reinstall it",
          path, shape);
    }
    product *= std::max<int64_t>(d, 1);
  }
  const int64_t total = std::count(dims.begin(), dims.end(), 0) ? 0 : product;
  // A header can declare far more data than the file holds: refuse before
  // allocating. Plain: exactly; gzip: deflate's maximum ratio (1032:1, zlib).
  const uint64_t header = 4 + 4 * dims.size();
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  const bool gzipped = in.gzipped();
  const uint64_t can_hold = gzipped ? file_size * 1032 : file_size - std::min(file_size, header);
  if (static_cast<uint64_t>(total) > can_hold) {
    core::raise<ConfigError>(
        "IDX file '{}' is truncated or corrupt: its header declares {} = {} bytes of data, {}. "
        "Re-download or reinstall it",
        path, shape, total,
        (gzipped ? fmt::format("more than a gzip file of {} bytes can hold", file_size)
                 : fmt::format("the file holds {}", can_hold)));
  }
  auto tensor = torch::empty(dims, torch::kUInt8);
  in.read(tensor.data_ptr<uint8_t>(), static_cast<std::size_t>(total), "the data");
  return tensor;
}

}  // namespace rankwise::data
