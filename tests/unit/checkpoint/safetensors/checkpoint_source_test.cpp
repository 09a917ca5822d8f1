// CheckpointSource (checkpoint/safetensors/checkpoint_source.h): a replicated
// file flattened into dotted keys, a sharded checkpoint's tensors read whole,
// and verify_entries() on a byte-flip sweep of a sharded checkpoint (as the
// fuzz sweep of sharded_untrusted_inputs_test.cpp, at fewer positions, to stay fast): every
// flip of a data file is found, naming the file and the key (what
// `rankwise-ckpt verify` prints).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "checkpoint/safetensors/checkpoint_source.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "support/workers.h"

namespace fs = std::filesystem;
using rankwise::checkpoint::safetensors::CheckpointSource;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST(CheckpointSource, FlattensAReplicatedFileIntoDottedKeysInOrder) {
  const auto dir = rankwise::test::fresh_dir("rankwise_checkpoint_source", "flat");
  c10::impl::GenericDict inner(c10::IntType::get(), c10::AnyType::get());
  inner.insert(int64_t{3}, at::full({2}, 3.0));
  c10::impl::GenericDict model(c10::StringType::get(), c10::AnyType::get());
  model.insert("w", at::arange(6, at::kFloat).reshape({2, 3}).t());
  model.insert("state", inner);
  c10::impl::GenericDict group(c10::StringType::get(), c10::AnyType::get());
  group.insert("lr", 0.5);
  c10::impl::GenericList groups(c10::AnyType::get());
  groups.push_back(group);
  rankwise::checkpoint::Checkpoint c;
  c.insert("model", model);
  c.insert("groups", groups);  // a list of dicts: flattened
  c.insert("betas", c10::ivalue::Tuple::create({c10::IValue(0.9), c10::IValue(0.99)}));  // plain values: one value
  c.insert("name", std::string("x"));
  rankwise::checkpoint::save((dir / "c.pt").string(), c);
  CheckpointSource source((dir / "c.pt").string(), "test");
  EXPECT_FALSE(source.sharded());
  EXPECT_TRUE(source.has_checksums());
  std::vector<std::string> keys;
  for (const auto& e : source.entries()) keys.push_back(e.key + (e.is_tensor ? " tensor" : " value"));
  EXPECT_EQ(keys, (std::vector<std::string>{"model.w tensor", "model.state.3 tensor", "groups.0.lr value", "betas value",
                                            "name value"}));
  const auto& w = source.entries()[0];
  EXPECT_EQ(w.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(w.bytes(), 24);
  const auto t = source.tensor(w);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat).reshape({2, 3}).t()));
  EXPECT_EQ(source.value(source.entries()[2]).toDouble(), 0.5);
  EXPECT_EQ(source.value(source.entries()[3]).toTupleRef().elements().at(1).toDouble(), 0.99);
  EXPECT_TRUE(source.verify_entries().empty());
  fs::remove_all(dir);
}

TEST(CheckpointSource, VerifyFindsEveryByteFlipOfAShardedCheckpointNamingFileAndKey) {
  const auto dir = rankwise::test::fresh_dir("rankwise_checkpoint_source", "flips") / "ckpt";
  rankwise::checkpoint::ShardedState state;
  state.emplace("rows", rankwise::checkpoint::shard_rows(at::arange(30, at::kFloat).reshape({10, 3}), 0, 1));
  state.emplace("half", rankwise::checkpoint::shard_flat(at::arange(6, at::kFloat).to(at::kBFloat16), 0, 1));
  state.emplace("ids", at::arange(4, at::kLong));
  state.emplace("epoch", rankwise::checkpoint::ObjectEntry{c10::IValue(int64_t{3})});
  rankwise::checkpoint::save_sharded(dir.string(), state);
  {
    CheckpointSource source(dir.string(), "test");
    ASSERT_TRUE(source.sharded());
    EXPECT_EQ(source.files(), (std::vector<std::string>{".metadata", ".rankwise-manifest.json", "__0_0.distcp"}));
    EXPECT_TRUE(source.verify_entries().empty());
    EXPECT_TRUE(at::equal(source.tensor(source.entries()[3]), at::arange(30, at::kFloat).reshape({10, 3})));
  }
  // Byte positions of the sweep in each data file: every record's first and
  // last byte, the edges of its storage (header | data | trailer), and every
  // 29th byte.
  const auto manifest = nlohmann::json::parse(read_bytes(dir / ".rankwise-manifest.json"));
  std::map<std::string, std::set<int64_t>> positions;
  std::set<std::string> keys;
  for (const auto& c : manifest["chunks"]) {
    const int64_t record = c["offset"], begin = c["data_begin"], size = c["data_size"], length = c["length"];
    auto& p = positions[c["file"].get<std::string>()];
    for (int64_t i : {int64_t{0}, begin - 1, begin, begin + size - 1, begin + size, length - 1}) {
      if (i >= 0 && i < length) p.insert(record + i);
    }
    keys.insert(c["key"].get<std::string>());
  }
  ASSERT_EQ(positions.size(), 1u);
  int flips = 0;
  for (auto& [file, flips_at] : positions) {
    const std::string original = read_bytes(dir / file);
    for (int64_t i = 0; i < static_cast<int64_t>(original.size()); i += 29) flips_at.insert(i);
    for (const int64_t i : flips_at) {
      std::string damaged = original;
      damaged[i] = static_cast<char>(damaged[i] ^ 0xff);
      write_bytes(dir / file, damaged);
      CheckpointSource source(dir.string(), "test");
      const auto failures = source.verify_entries();
      ASSERT_EQ(failures.size(), 1u) << file << " byte " << i;  // one record holds the byte
      EXPECT_NE(failures[0].find("file '" + file + "'"), std::string::npos) << failures[0];
      bool names_key = false;
      for (const auto& key : keys) names_key |= failures[0].find("'" + key + "'") != std::string::npos;
      EXPECT_TRUE(names_key) << failures[0];
      ++flips;
    }
    write_bytes(dir / file, original);
  }
  EXPECT_GT(flips, 100);
  // .metadata: refused when opened, naming it.
  const std::string metadata = read_bytes(dir / ".metadata");
  for (std::size_t i = 0; i < metadata.size(); i += 37) {
    std::string damaged = metadata;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x01);
    write_bytes(dir / ".metadata", damaged);
    try {
      CheckpointSource source(dir.string(), "test");
      ADD_FAILURE() << ".metadata byte " << i << " flipped was opened";
    } catch (const rankwise::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("'.metadata'"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir.parent_path());
}
