#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "rankwise/data/fashion_mnist.h"
#include "rankwise/data/idx.h"
#include "rankwise/error.h"

namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "rankwise_idx_" + name;
}

std::string idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::string bytes = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    bytes += static_cast<char>(d >> 24);
    bytes += static_cast<char>(d >> 16);
    bytes += static_cast<char>(d >> 8);
    bytes += static_cast<char>(d);
  }
  bytes.append(data.begin(), data.end());
  return bytes;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const rankwise::ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

}  // namespace

TEST(Idx, ReadsGzippedImages) {
  const auto path = temp_path("images.gz");
  std::vector<uint8_t> data(2 * 3 * 2);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 10);
  write_gz(path, idx_bytes({2, 3, 2}, data));
  auto t = rankwise::data::read_idx(path);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(t.scalar_type(), torch::kUInt8);
  EXPECT_EQ(t[1][2][1].item<int>(), 110);
  EXPECT_EQ(t[0][0][1].item<int>(), 10);
}

TEST(Idx, ReadsPlainLabels) {
  const auto path = temp_path("labels");
  write_plain(path, idx_bytes({4}, {3, 1, 4, 1}));
  auto t = rankwise::data::read_idx(path);
  ASSERT_EQ(t.numel(), 4);
  EXPECT_EQ(t[2].item<int>(), 4);
}

TEST(Idx, TruncatedFileNamesFile) {
  const auto path = temp_path("truncated.gz");
  write_gz(path, idx_bytes({10, 28, 28}, std::vector<uint8_t>(100, 7)));  // 7840 bytes declared
  const auto message = message_of([&] { rankwise::data::read_idx(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("100 of 7840"), std::string::npos) << message;
}

TEST(Idx, BadMagicAndMissingFile) {
  const auto path = temp_path("bad");
  write_plain(path, "not an idx file at all");
  EXPECT_NE(message_of([&] { rankwise::data::read_idx(path); }).find("bad magic"), std::string::npos);
  const auto missing = temp_path("missing.gz");
  std::remove(missing.c_str());
  EXPECT_NE(message_of([&] { rankwise::data::read_idx(missing); }).find("does not exist"),
            std::string::npos);
}

TEST(FashionMnist, MissingDirectoryNamesFileAndPackage) {
  const auto message = message_of([] { rankwise::data::load_fashion_mnist("/nonexistent/dir", true); });
  EXPECT_NE(message.find("/nonexistent/dir/train-images-idx3-ubyte.gz"), std::string::npos)
      << message;
  EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;
}

TEST(FashionMnist, RealTestSplitWhenInstalled) {
  std::ifstream probe(std::string(rankwise::data::kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz");
  if (!probe) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto data = rankwise::data::load_fashion_mnist(rankwise::data::kFashionMnistDir, false, /*normalize=*/false);
  EXPECT_EQ(data.images.sizes(), (std::vector<int64_t>{10000, 784}));
  EXPECT_EQ(data.labels.sizes(), (std::vector<int64_t>{10000}));
  // Published facts of the data set: 1,000 test images per class, first label 9 (ankle boot).
  EXPECT_EQ(data.labels[0].item<int64_t>(), 9);
  EXPECT_EQ(torch::bincount(data.labels).eq(1000).all().item<bool>(), true);
  EXPECT_LE(data.images.max().item<float>(), 1.0f);
  EXPECT_GE(data.images.min().item<float>(), 0.0f);
}
