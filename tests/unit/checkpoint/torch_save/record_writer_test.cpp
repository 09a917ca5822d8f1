// write_tensor_record (src/checkpoint/torch_save/record_writer.h): the streamed
// torch.save record of a tensor, read back by parse_tensor_record and, where
// a Python with torch exists, by torch.load (tests/python/record_interop.py).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint/torch_save/record_writer.h"
#include "checkpoint/torch_save/tensor_bytes.h"
#include "checkpoint/torch_save/tensor_record.h"
#include "rankwise/error.h"
#include "support/shell.h"
#include "support/workers.h"

namespace {

using rankwise::checkpoint::torch_save::WrittenRecord;

struct Written {
  std::string bytes;
  WrittenRecord record;
};

Written write(const at::Tensor& t, int64_t block_bytes = 16) {
  Written w;
  w.record = rankwise::checkpoint::torch_save::write_tensor_record(t, block_bytes,
                                                   [&](const char* data, std::size_t n) { w.bytes.append(data, n); });
  return w;
}

rankwise::checkpoint::torch_save::TensorRecord parse(const std::string& bytes) {
  return rankwise::checkpoint::torch_save::parse_tensor_record(
      [&](int64_t at, int64_t n) { return bytes.substr(static_cast<std::size_t>(at), static_cast<std::size_t>(n)); },
      static_cast<int64_t>(bytes.size()), "a test record");
}

uint32_t zlib_crc(const std::string& s, std::size_t at, std::size_t n) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(s.data() + at), static_cast<uInt>(n)));
}

// The same tensors as tests/python/record_interop.py's cases(), built the same way.
std::map<std::string, at::Tensor> cases() {
  return {
      {"contiguous", at::arange(15, at::kFloat).reshape({3, 5}) * 0.5},
      {"transposed", at::arange(24, at::kDouble).reshape({4, 6}).t()},
      {"sliced", (at::arange(40, at::kLong) * 1000000000007).reshape({5, 8}).slice(0, 1, 4).slice(1, 0, 8, 3)},
      {"empty", at::zeros({0, 3}, at::kFloat)},
      {"scalar", at::scalar_tensor(2.5, at::kBFloat16)},
      {"bf16", (at::arange(12, at::kFloat) / 4).to(at::kBFloat16).reshape({3, 4}).slice(1, 1, 4)},
      {"bool", (at::arange(20) % 3 == 0).reshape({4, 5}).t()},
  };
}

struct Layout {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

TEST(RecordWriter, ParseTensorRecordReadsBackDtypeSizesStridesAndData) {
  const std::map<std::string, Layout> expected = {
      {"contiguous", {at::kFloat, {3, 5}, {5, 1}}},    {"transposed", {at::kDouble, {6, 4}, {4, 1}}},
      {"sliced", {at::kLong, {3, 3}, {3, 1}}},         {"empty", {at::kFloat, {0, 3}, {3, 1}}},
      {"scalar", {at::kBFloat16, {}, {}}},             {"bf16", {at::kBFloat16, {3, 3}, {3, 1}}},
      {"bool", {at::kBool, {5, 4}, {4, 1}}},
  };
  for (const auto& [name, t] : cases()) {
    SCOPED_TRACE(name);
    const Written w = write(t);
    const auto r = parse(w.bytes);
    const Layout& want = expected.at(name);
    EXPECT_EQ(r.dtype, want.dtype);
    EXPECT_EQ(r.sizes, want.sizes);
    EXPECT_EQ(r.strides, want.strides);
    EXPECT_EQ(r.storage_offset, 0);
    EXPECT_EQ(r.data_begin % 64, 0);  // PyTorch aligns every entry's data to 64 bytes
    EXPECT_EQ(r.data_size, t.numel() * static_cast<int64_t>(t.element_size()));
    EXPECT_EQ(w.record.data_begin, r.data_begin);
    EXPECT_EQ(w.record.data_size, r.data_size);
    EXPECT_EQ(w.record.length, static_cast<int64_t>(w.bytes.size()));
    const at::Tensor c = t.contiguous();
    EXPECT_EQ(w.bytes.substr(static_cast<std::size_t>(r.data_begin), static_cast<std::size_t>(r.data_size)),
              std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(r.data_size)));
  }
}

TEST(RecordWriter, ChecksumsAreZlibCrc32sOfHeaderBlocksAndTrailer) {
  for (const auto& [name, t] : cases()) {
    SCOPED_TRACE(name);
    const Written w = write(t, 16);  // 16-byte blocks: several, the last one partial for most cases
    const auto& r = w.record;
    EXPECT_EQ(r.header_crc32, zlib_crc(w.bytes, 0, static_cast<std::size_t>(r.data_begin)));
    const int64_t trailer = r.data_begin + r.data_size;
    EXPECT_EQ(r.trailer_crc32,
              zlib_crc(w.bytes, static_cast<std::size_t>(trailer), static_cast<std::size_t>(r.length - trailer)));
    std::vector<uint32_t> blocks;
    for (int64_t b = 0; b < r.data_size; b += 16) {
      blocks.push_back(zlib_crc(w.bytes, static_cast<std::size_t>(r.data_begin + b),
                                static_cast<std::size_t>(std::min<int64_t>(16, r.data_size - b))));
    }
    EXPECT_EQ(r.block_crc32, blocks);
  }
}

TEST(RecordWriter, RejectsADtypeDcpFilesOfRankwiseDoNotHold) {
  EXPECT_THROW(write(at::empty({2}, at::kComplexHalf)), rankwise::CheckpointError);
}

TEST(TensorBytes, PiecesOfANonContiguousTensorAreBoundedAndInRowMajorOrder) {
  // 24-byte pieces: rows of the transposed [6, 4] int64 tensor are 32 bytes, so each row is split further.
  const at::Tensor t = at::arange(24, at::kLong).reshape({4, 6}).t();
  for (const int64_t max_bytes : {int64_t{8}, int64_t{24}, int64_t{64}, int64_t{1} << 20}) {
    SCOPED_TRACE(max_bytes);
    std::string bytes;
    std::size_t largest = 0;
    rankwise::checkpoint::torch_save::for_each_byte_piece(t, max_bytes, [&](const char* data, std::size_t n) {
      bytes.append(data, n);
      largest = std::max(largest, n);
    });
    EXPECT_LE(largest, static_cast<std::size_t>(max_bytes));
    std::vector<int64_t> values(24);
    ASSERT_EQ(bytes.size(), values.size() * 8);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    // Element (i, j) of t is 6 * j + i.
    std::vector<int64_t> want;
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 4; ++j) want.push_back(6 * j + i);
    }
    EXPECT_EQ(values, want);
  }
}

TEST(TensorBytes, ALazilyConjugatedTensorGivesItsConjugatedValues) {
  const at::Tensor z = at::complex(at::arange(3, at::kFloat), at::full({3}, 2.0, at::kFloat)).conj();
  ASSERT_TRUE(z.is_conj() && z.is_contiguous());
  std::string bytes;
  rankwise::checkpoint::torch_save::for_each_byte_piece(z, 1 << 20, [&](const char* data, std::size_t n) { bytes.append(data, n); });
  std::vector<float> values(6);
  ASSERT_EQ(bytes.size(), values.size() * sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  EXPECT_EQ(values, (std::vector<float>{0, -2, 1, -2, 2, -2}));  // (re, im) pairs of conj(k + 2i)
}

class RecordWriterPython : public ::testing::TestWithParam<rankwise::test::ReferencePython> {};

TEST_P(RecordWriterPython, TorchLoadReadsStreamedRecordsWithPythonsValues) {
  const std::string interpreter = GetParam().interpreter;
  if (interpreter.empty() || !rankwise::test::have_python_torch(interpreter)) {
    GTEST_SKIP() << "no Python with torch (" << interpreter << ")";
  }
  const auto dir = rankwise::test::fresh_dir("rankwise_record", GetParam().name);
  for (const auto& [name, t] : cases()) {
    std::ofstream out(dir / (name + ".pt"), std::ios::binary);
    rankwise::checkpoint::torch_save::write_tensor_record(t, 1 << 18, [&](const char* data, std::size_t n) {
      out.write(data, static_cast<std::streamsize>(n));
    });
  }
  const std::string out =
      rankwise::test::shell(rankwise::test::python(interpreter) + RANKWISE_SOURCE_DIR +
                            "/tests/python/record_interop.py " + dir.string() + " 2>&1");
  for (const auto& [name, t] : cases()) EXPECT_NE(out.find(name + " ok\n"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Interpreters, RecordWriterPython, ::testing::ValuesIn(rankwise::test::kReferencePythons),
                         [](const auto& info) { return rankwise::test::reference_python_name(info.param); });

}  // namespace
