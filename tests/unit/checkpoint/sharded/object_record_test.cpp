// Non-tensor entries of sharded checkpoints (ObjectEntry; DCP's
// BytesStorageMetadata) and read_sharded_metadata(). Python's side of them
// (dcp.load and dcp_to_torch_save reading ours, ours reading dcp.save's) is
// in sharded_checkpoint_test.cpp's ShardedCheckpointPython tests.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/error.h"
#include "support/sharded.h"
#include "support/workers.h"

namespace fs = std::filesystem;

namespace {

const std::string kRun = RANKWISE_RUN_PATH;
const std::string kWorker = std::string(RANKWISE_TEST_PROGRAMS_DIR) + "/torch_sharded_checkpoint";

fs::path fresh_dir(const std::string& name) { return rankwise::test::fresh_dir("rankwise_sharded_objects", name); }

std::string text(const c10::IValue& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

rankwise::checkpoint::ShardedState saved_state() {
  rankwise::checkpoint::ShardedState state;
  state.emplace("weight", rankwise::checkpoint::shard_rows(at::arange(6, at::kFloat).reshape({3, 2}), 0, 1));
  state.emplace("lr", rankwise::checkpoint::ObjectEntry{c10::IValue(0.125)});
  state.emplace("betas", rankwise::checkpoint::ObjectEntry{c10::ivalue::Tuple::create({c10::IValue(0.5), c10::IValue(0.25)})});
  state.emplace("epoch", rankwise::checkpoint::ObjectEntry{c10::IValue(int64_t{41})});
  state.emplace("tag", rankwise::checkpoint::ObjectEntry{c10::IValue(std::string("run-a"))});
  state.emplace("nothing", rankwise::checkpoint::ObjectEntry{c10::IValue()});
  return state;
}

rankwise::checkpoint::ShardedState targets() {
  rankwise::checkpoint::ShardedState state;
  state.emplace("weight", rankwise::checkpoint::zeros_sharded_rows({3, 2}, at::kFloat, 0, 1));
  for (const char* key : {"lr", "betas", "epoch", "tag", "nothing"}) state.emplace(key, rankwise::checkpoint::ObjectEntry{});
  return state;
}

std::string load_error(const fs::path& dir, rankwise::checkpoint::ShardedState state) {
  return rankwise::test::sharded_load_error(dir.string(), std::move(state));
}

}  // namespace

TEST(ShardedObjects, RoundTripReplacesEachObjectWithTheStoredValue) {
  const auto dir = fresh_dir("roundtrip") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), saved_state());
  auto loaded = targets();
  loaded.at("epoch") = rankwise::checkpoint::ObjectEntry{c10::IValue(std::string("replaced, whatever it held"))};
  rankwise::checkpoint::load_sharded(dir.string(), loaded);
  EXPECT_EQ(text(std::get<rankwise::checkpoint::ObjectEntry>(loaded.at("lr")).value), "0.125");
  EXPECT_EQ(text(std::get<rankwise::checkpoint::ObjectEntry>(loaded.at("betas")).value), "(0.5, 0.25)");
  EXPECT_EQ(std::get<rankwise::checkpoint::ObjectEntry>(loaded.at("epoch")).value.toInt(), 41);
  EXPECT_EQ(std::get<rankwise::checkpoint::ObjectEntry>(loaded.at("tag")).value.toStringRef(), "run-a");
  EXPECT_TRUE(std::get<rankwise::checkpoint::ObjectEntry>(loaded.at("nothing")).value.isNone());
  const auto& weight = std::get<rankwise::checkpoint::ShardedTensor>(loaded.at("weight")).chunks().at(0).data;
  EXPECT_TRUE(at::equal(weight, at::arange(6, at::kFloat).reshape({3, 2})));
  fs::remove_all(dir.parent_path());
}

TEST(ShardedObjects, ReadShardedMetadataListsTensorsAndObjects) {
  const auto dir = fresh_dir("metadata") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), saved_state());
  const auto entries = rankwise::checkpoint::read_sharded_metadata(dir.string());
  std::string keys;
  for (const auto& [key, e] : entries) keys += key + (e.is_tensor ? "(tensor) " : "(object) ");
  EXPECT_EQ(keys, "betas(object) epoch(object) lr(object) nothing(object) tag(object) weight(tensor) ");
  EXPECT_EQ(entries.at("weight").global_shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(entries.at("weight").dtype, at::kFloat);
  EXPECT_EQ(entries.at("weight").stored_chunks, 1);
  EXPECT_EQ(entries.at("lr").stored_chunks, 0);
  try {
    rankwise::checkpoint::read_sharded_metadata(dir.parent_path().string());
    ADD_FAILURE() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("has no .metadata"), std::string::npos) << e.what();
  }
  std::ofstream(dir.parent_path() / "state.pt") << "a file";
  try {
    rankwise::checkpoint::read_sharded_metadata((dir.parent_path() / "state.pt").string());
    ADD_FAILURE() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("this is a file, not a sharded checkpoint directory (a replicated "
                                         "checkpoint file is read by rankwise::checkpoint::load)"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir.parent_path());
}

TEST(ShardedObjects, AFlippedByteInAnObjectNamesIt) {
  const auto dir = fresh_dir("flip") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), saved_state());
  // The string's first byte in the data file: "run-a" becomes "bun-a".
  std::string bytes;
  {
    std::ifstream in(dir / "__0_0.distcp", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = bytes.find("run-a");
  ASSERT_NE(at, std::string::npos);
  {
    std::fstream f(dir / "__0_0.distcp", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write("b", 1);
  }
  const std::string error = load_error(dir, targets());
  EXPECT_NE(error.find("checksum mismatch in the file '__0_0.distcp', object 'tag'"), std::string::npos) << error;
  // Without the manifest (as from Python's dcp.save) nothing is verified but the zip's own CRC, if the
  // unpickler checks it: either the error names the object, or the damaged value comes back.
  fs::remove(dir / ".rankwise-manifest.json");
  auto unverified = targets();
  std::string second = "no error";
  try {
    rankwise::checkpoint::load_sharded(dir.string(), unverified);
  } catch (const rankwise::CheckpointError& e) {
    second = e.what();
  }
  if (second == "no error") {
    EXPECT_EQ(std::get<rankwise::checkpoint::ObjectEntry>(unverified.at("tag")).value.toStringRef(), "bun-a");
  } else {
    EXPECT_NE(second.find("__0_0.distcp: object tag"), std::string::npos) << second;
  }
  fs::remove_all(dir.parent_path());
}

TEST(ShardedObjects, KindMismatchesAndTensorsInObjectsAreClearErrors) {
  const auto dir = fresh_dir("kinds") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), saved_state());
  auto as_tensor = targets();
  as_tensor.at("lr") = at::zeros({});
  std::string error = load_error(dir, as_tensor);
  EXPECT_NE(error.find("'lr' is an object (a non-tensor value) in the checkpoint, a tensor in the state to load"),
            std::string::npos)
      << error;
  auto as_object = targets();
  as_object.at("weight") = rankwise::checkpoint::ObjectEntry{};
  error = load_error(dir, as_object);
  EXPECT_NE(error.find("'weight' is a tensor in the checkpoint, an ObjectEntry in the state to load"),
            std::string::npos)
      << error;
  auto missing = targets();
  missing.erase("tag");
  error = load_error(dir, missing);
  EXPECT_NE(error.find("in the checkpoint but not wanted: [tag (an object)]"), std::string::npos) << error;

  auto bad = saved_state();
  bad.at("lr") = rankwise::checkpoint::ObjectEntry{c10::IValue(c10::List<at::Tensor>({at::ones({2})}))};
  try {
    rankwise::checkpoint::save_sharded((dir.parent_path() / "bad").string(), bad);
    ADD_FAILURE() << "no error";
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the object entry 'lr' holds a tensor"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.parent_path() / "bad"));
  fs::remove_all(dir.parent_path());
}

TEST(ShardedObjectsProcesses, RanksThatSaveDifferentValuesAreNamedAndNothingIsPublished) {
  const auto dir = fresh_dir("skewed") / "ckpt";
  const auto out = rankwise::test::run_launched(kRun, 2, kWorker, "save-skewed " + dir.string() + " rankwise 0");
  EXPECT_EQ(out.find("exit=0"), std::string::npos) << out;
  // Each rank's value is shown (once only their pickles' CRC-32s).
  EXPECT_NE(out.find("rank 1 and rank 0 differ at 'epoch': rank 0 has the object 0, rank 1 has the object 1."),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(dir));
  fs::remove_all(dir.parent_path());
}

TEST(ShardedObjects, ADirectoryWithoutItsManifestIsNotedAsUnverified) {
  const auto dir = fresh_dir("no_manifest") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), saved_state());
  fs::remove(dir / ".rankwise-manifest.json");
  auto loaded = targets();
  testing::internal::CaptureStderr();
  rankwise::checkpoint::load_sharded(dir.string(), loaded);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no .rankwise-manifest.json, so nothing read from it is verified"), std::string::npos) << err;
  EXPECT_EQ(std::get<rankwise::checkpoint::ObjectEntry>(loaded.at("tag")).value.toStringRef(), "run-a");
  fs::remove_all(dir.parent_path());
}
