// The safetensors format as written (checkpoint/safetensors/safetensors_file.h),
// byte by byte against the format's description (huggingface/safetensors
// README): length, JSON header padded with spaces to 8 bytes, data.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/safetensors/safetensors_file.h"
#include "rankwise/error.h"
#include "support/workers.h"

namespace fs = std::filesystem;
using rankwise::checkpoint::safetensors::HeaderTensor;
using rankwise::checkpoint::safetensors::SafetensorsWriter;

void refuses_tensors_out_of_order();

TEST(SafetensorsFile, WritesTheFormatByteByByteAndRefusesTensorsOutOfOrder) {
  const auto dir = rankwise::test::fresh_dir("rankwise_safetensors_file", "bytes");
  const auto path = (dir / "x.safetensors").string();
  SafetensorsWriter writer(path, {{"x", c10::ScalarType::Float, {2}, 8}, {"m", c10::ScalarType::Bool, {3, 1}, 3}},
                           {{"format", "pt"}});
  writer.write("x", at::tensor({1.0f, -2.0f}));
  writer.write("m", (at::tensor({1, 0, 1}) == 1).reshape({3, 1}));
  EXPECT_FALSE(fs::exists(path));  // nothing under the name before commit()
  writer.commit();
  std::ifstream in(path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  // 142 bytes of JSON (counted by hand), padded with 2 spaces to 144 = 0x90.
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("m":{"dtype":"BOOL","shape":[3,1],"data_offsets":[8,11]}})";
  ASSERT_EQ(json.size(), 142u);
  const std::string expected = std::string("\x90\0\0\0\0\0\0\0", 8) + json + "  " +
                               // 1.0f = 0x3f800000, -2.0f = 0xc0000000, little-endian; then 1, 0, 1.
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x01\x00\x01", 11);
  EXPECT_EQ(bytes, expected);
  fs::remove_all(dir);
  refuses_tensors_out_of_order();
}

// Part of SafetensorsFile.WritesTheFormatByteByByteAndRefusesTensorsOutOfOrder.
void refuses_tensors_out_of_order() {
  const auto dir = rankwise::test::fresh_dir("rankwise_safetensors_file", "order");
  const auto path = (dir / "x.safetensors").string();
  {
    SafetensorsWriter writer(path, {{"a", c10::ScalarType::Float, {2}, 8}, {"b", c10::ScalarType::Float, {1}, 4}}, {});
    EXPECT_THROW(writer.write("b", at::ones({1})), rankwise::CheckpointError);
    EXPECT_THROW(writer.write("a", at::ones({3})), rankwise::CheckpointError);  // another shape
    writer.write("a", at::ones({2}));
    EXPECT_THROW(writer.commit(), rankwise::CheckpointError);  // "b" is missing
  }
  EXPECT_TRUE(fs::is_empty(dir));  // the temporary file went with the writer
  fs::remove_all(dir);
}
