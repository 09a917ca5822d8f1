// Files a user may get from anywhere. Every input that made a fuzz target
// crash (fuzz/, `make fuzz`; see BENCHMARKS.md) is kept here, rebuilt from
// valid files the way the crasher was made, and must fail with a rankwise
// error naming what is wrong, never a crash or a foreign exception.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rankwise/data/idx.h"
#include "rankwise/error.h"

namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  static const fs::path dir = [] {
    auto d = fs::temp_directory_path() / ("rankwise_untrusted_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir / name;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

fs::path write_file(const std::string& name, const std::string& bytes) {
  const fs::path path = scratch(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// The message of the E that f throws; other exceptions escape and fail the test.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

std::string idx_header(const std::vector<uint32_t>& dims) {
  std::string bytes = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) bytes += static_cast<char>(d >> shift);
  }
  return bytes;
}

std::string idx_error(const std::string& name, const std::string& bytes) {
  const fs::path path = write_file(name, bytes);
  return error_of<rankwise::ConfigError>([&] { rankwise::read_idx(path.string()); });
}

std::string gzipped(const std::string& bytes) {
  uLongf size = compressBound(bytes.size()) + 32;
  std::string out(size, '\0');
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // gzip
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(size);
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

// fuzz_idx: four dimensions whose product overflows int64 (2^66; UBSan:
// signed integer overflow), wrapping to a size the reader then trusted.
TEST(UntrustedIdx, DimensionsWhoseProductOverflowsAreRefused) {
  const std::string error =
      idx_error("overflow.idx", idx_header({0x10000, 0x10000, 0x20000, 0x20000}) + "data");
  EXPECT_NE(error.find("declares dimensions 65536x65536x131072x131072, more than 2^34 bytes"),
            std::string::npos)
      << error;
}

// fuzz_idx: a zero dimension among huge ones: 0 bytes, but libtorch's
// torch::empty refuses the sizes (c10::Error, not a rankwise error).
TEST(UntrustedIdx, HugeDimensionsBesideAZeroAreRefused) {
  const std::string error =
      idx_error("zero.idx", idx_header({34048, 4244570120u, 33554949, 0}));
  EXPECT_NE(error.find("declares dimensions 34048x4244570120x33554949x0, more than 2^34 bytes"),
            std::string::npos)
      << error;
}

// A 16-byte file that declares 7.8 MB (plain) or a 40-byte gzip file that
// declares 8 GiB: refused before the tensor is allocated, not after.
TEST(UntrustedIdx, DataLargerThanTheFileCanHoldIsRefusedBeforeAllocating) {
  const std::string plain = idx_error("short.idx", idx_header({10000, 28, 28}));
  EXPECT_NE(plain.find("its header declares 10000x28x28 = 7840000 bytes of data, the file holds 0"),
            std::string::npos)
      << plain;
  const std::string gz = idx_error("short.idx.gz", gzipped(idx_header({2, 1 << 30, 4})));
  EXPECT_NE(gz.find("declares 2x1073741824x4 = 8589934592 bytes of data, more than a gzip file of"),
            std::string::npos)
      << gz;
}
