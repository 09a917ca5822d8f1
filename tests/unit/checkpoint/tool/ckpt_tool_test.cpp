// rankwise-ckpt's commands (checkpoint/tool/ckpt_tool.h), run in-process:
// inspect's listing (bytes counted by hand), verify on good and damaged
// checkpoints, conversions that diff bitwise equal, diff's differences and
// tolerance, and bad input (one line, exit 2). The program itself, end to
// end: e2e.checkpoint_tool.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "checkpoint/tool/ckpt_tool.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "support/workers.h"

namespace fs = std::filesystem;
namespace ckpt = rankwise::checkpoint;

namespace {

struct Outcome {
  int status = -1;
  std::string out, err;
};

Outcome ckpt_tool(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"rankwise-ckpt"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int status = ckpt::tool::run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {status, out.str(), err.str()};
}

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

// A one-rank sharded checkpoint: 2 chunks of rows (one "rank" holding both
// halves is not possible at one rank, so one chunk each), bfloat16, bool,
// int64, a replicated tensor and values.
fs::path sharded_sample(const fs::path& dir, float shift = 0) {
  ckpt::ShardedState state;
  state.emplace("rows", ckpt::shard_rows(at::arange(30, at::kFloat).reshape({10, 3}) + shift, 0, 1));
  state.emplace("half", ckpt::shard_rows(at::arange(6, at::kFloat).to(at::kBFloat16), 0, 1));
  state.emplace("mask", ckpt::shard_rows(at::arange(10) % 3 == 0, 0, 1));
  state.emplace("ids", at::arange(4, at::kLong));
  state.emplace("epoch", ckpt::ObjectEntry{c10::IValue(int64_t{3})});
  state.emplace("name", ckpt::ObjectEntry{c10::IValue(std::string("run-a"))});
  ckpt::save_sharded((dir / "sharded").string(), state);
  return dir / "sharded";
}

void flip(const fs::path& file, int64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0xff));
}

// Where the storage of `key`'s first chunk starts in its data file.
std::pair<std::string, int64_t> data_of(const fs::path& dir, const std::string& key) {
  const auto manifest = nlohmann::json::parse(std::ifstream(dir / ".rankwise-manifest.json"));
  for (const auto& c : manifest["chunks"]) {
    if (c["key"] == key) return {c["file"], c["offset"].get<int64_t>() + c["data_begin"].get<int64_t>()};
  }
  return {"", -1};
}

}  // namespace

void verify_passes_good_and_names_damaged();

TEST(CkptTool, InspectListsEntriesAndVerifyNamesTheFileAndKeyOfADamagedOne) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "inspect");
  const auto sharded = sharded_sample(dir);
  const auto r = ckpt_tool({"inspect", sharded.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string lines[] = {
      sharded.string() + ": sharded (DCP directory) checkpoint, CRC-32s recorded",
      "entries: 4 tensors (174 bytes), 2 other values",  // 120 + 12 + 10 + 32
      "  rows  float32  [10, 3]  120 bytes  1 chunks",
      "  half  bfloat16  [6]  12 bytes  1 chunks",
      "  mask  bool  [10]  10 bytes  1 chunks",
      "  ids  int64  [4]  32 bytes  1 chunks",
      "  epoch  = 3",
      "  name  = \"run-a\""};
  for (const auto& line : lines) EXPECT_TRUE(has_line(r.out, line)) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("  __0_0.distcp  " + std::to_string(fs::file_size(sharded / "__0_0.distcp")) + " bytes\n"),
            std::string::npos)
      << r.out;
  // A TrainingState checkpoint: its identity.
  ckpt::Checkpoint state;
  state.insert("format", std::string("rankwise.training_state/2"));
  state.insert("step", int64_t{200});
  state.insert("epoch", int64_t{2});
  state.insert("world_size", int64_t{4});
  state.insert("w", at::ones({2}));
  ckpt::save((dir / "state.pt").string(), state);
  const auto t = ckpt_tool({"inspect", (dir / "state.pt").string()});
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_TRUE(has_line(t.out, "training state: format rankwise.training_state/2, step 200, epoch 2, world_size 4"))
      << t.out;
  fs::remove_all(dir);
  verify_passes_good_and_names_damaged();
}

// Part of CkptTool.InspectListsEntriesAndVerifyNamesTheFileAndKeyOfADamagedOne.
void verify_passes_good_and_names_damaged() {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "verify");
  const auto sharded = sharded_sample(dir);
  auto r = ckpt_tool({"verify", sharded.string()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "OK: " + sharded.string() + ": .metadata and 6 entries in 1 data files match the manifest's CRC-32s"))
      << r.out;
  ASSERT_EQ(ckpt_tool({"convert", "--to", "torch-save", sharded.string(), (dir / "r.pt").string()}).status, 0);
  r = ckpt_tool({"verify", (dir / "r.pt").string()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "OK: " + (dir / "r.pt").string() + ": the CRC-32 of the whole file matches")) << r.out;

  const auto [file, at] = data_of(sharded, "half");
  flip(sharded / file, at + 3);
  r = ckpt_tool({"verify", sharded.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("FAILED: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("file '__0_0.distcp', tensor 'half'"), std::string::npos) << r.out;
  EXPECT_TRUE(has_line(r.out, sharded.string() + ": 1 of 6 entries damaged")) << r.out;

  flip(dir / "r.pt", 200);
  r = ckpt_tool({"verify", (dir / "r.pt").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("FAILED: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find((dir / "r.pt").string()), std::string::npos) << r.out;

  // A data file deleted: every entry it held is named, with the file.
  fs::create_directories(dir / "gone");
  const auto gone = sharded_sample(dir / "gone");
  fs::remove(gone / file);
  r = ckpt_tool({"verify", gone.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("FAILED: tensor 'half': "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot open data file '" + file + "'"), std::string::npos) << r.out;
  EXPECT_TRUE(has_line(r.out, gone.string() + ": 6 of 6 entries damaged")) << r.out;

  // No checksums (a directory as Python's dcp.save writes it): nothing to verify, exit 1.
  fs::remove(sharded / ".rankwise-manifest.json");
  r = ckpt_tool({"verify", sharded.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("UNVERIFIED: "), std::string::npos) << r.out;
  fs::remove_all(dir);
}

void diff_lists_changes_within_a_tolerance();

TEST(CkptTool, ConversionsDiffBitwiseEqualAndChangesAreListed) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "convert");
  const auto sharded = sharded_sample(dir);
  auto r = ckpt_tool({"convert", "--to", "torch-save", sharded.string(), (dir / "r.pt").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "wrote 6 entries (flat dotted keys) to " + (dir / "r.pt").string())) << r.out;
  EXPECT_FALSE(fs::exists(dir / "r.pt.lock"));  // the save's lock file is not left beside it
  ASSERT_EQ(ckpt_tool({"convert", "--to", "sharded", (dir / "r.pt").string(), (dir / "back").string()}).status, 0);
  EXPECT_FALSE(fs::exists(dir / "back.lock"));
  r = ckpt_tool({"diff", sharded.string(), (dir / "r.pt").string()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "identical: 6 entries (bitwise)")) << r.out;
  EXPECT_EQ(ckpt_tool({"diff", (dir / "back").string(), (dir / "r.pt").string()}).status, 0);
  // The torch.save file is what load() reads.
  const auto loaded = ckpt::load((dir / "r.pt").string());
  EXPECT_TRUE(at::equal(loaded.at("rows").toTensor(), at::arange(30, at::kFloat).reshape({10, 3})));
  EXPECT_EQ(loaded.at("name").toStringRef(), "run-a");
  r = ckpt_tool({"convert", "--to", "safetensors", "--max-shard-bytes", "100", sharded.string(), (dir / "st").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "skipped 2 values that are not tensors: epoch, name")) << r.out;
  EXPECT_TRUE(fs::exists(dir / "st" / "model.safetensors.index.json"));
  // inspect reads what convert --to safetensors wrote; the other commands say they do not.
  ASSERT_EQ(ckpt_tool({"convert", "--to", "safetensors", sharded.string(), (dir / "one.safetensors").string()}).status, 0);
  r = ckpt_tool({"inspect", (dir / "one.safetensors").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, (dir / "one.safetensors").string() + ": safetensors file, no checksums (the format records none)")) << r.out;
  EXPECT_TRUE(has_line(r.out, "  rows  F32  [10, 3]  120 bytes")) << r.out;
  r = ckpt_tool({"verify", (dir / "one.safetensors").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("is a safetensors file: `rankwise-ckpt inspect` lists it"), std::string::npos) << r.err;
  fs::remove_all(dir);
  diff_lists_changes_within_a_tolerance();
}

// Part of CkptTool.ConversionsDiffBitwiseEqualAndChangesAreListed.
void diff_lists_changes_within_a_tolerance() {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "diff");
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  const auto a = sharded_sample(dir / "a");
  const auto b = sharded_sample(dir / "b", 0.001f);  // every element of rows 0.001 larger
  auto r = ckpt_tool({"diff", a.string(), b.string()});
  EXPECT_EQ(r.status, 1);
  // Element 0: 0 vs 0.001 (as float32: 0.0010000000474974513).
  EXPECT_NE(r.out.find("differ: rows: 30 of 30 elements differ (first at flat index 0: 0 vs 0.0010000000474974513); "
                       "max |a - b| 0.001"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(has_line(r.out, "1 differences (bitwise)")) << r.out;
  r = ckpt_tool({"diff", "--atol", "0.002", a.string(), b.string()});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "identical: 6 entries (atol 0.002, rtol 0)")) << r.out;
  r = ckpt_tool({"diff", "--rtol", "1e-5", a.string(), b.string()});  // 0 vs 0.001 is no relative 1e-5
  EXPECT_EQ(r.status, 1) << r.out;
  // Keys in one only, and values that differ.
  ckpt::Checkpoint c1, c2;
  c1.insert("only_a", at::ones({1}));
  c1.insert("step", int64_t{1});
  c2.insert("only_b", at::ones({1}));
  c2.insert("step", int64_t{2});
  ckpt::save((dir / "1.pt").string(), c1);
  ckpt::save((dir / "2.pt").string(), c2);
  r = ckpt_tool({"diff", (dir / "1.pt").string(), (dir / "2.pt").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has_line(r.out, "only in A: only_a")) << r.out;
  EXPECT_TRUE(has_line(r.out, "only in B: only_b")) << r.out;
  EXPECT_TRUE(has_line(r.out, "differ: step: 1 vs 2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "3 differences (bitwise)")) << r.out;
  fs::remove_all(dir);
}

// The same values in a typed List[int] (libtorch's tagged pickle, as
// rankwise wrote checkpoints up to 0.2.0) and in a plain list (Python's, and
// rankwise's now) are no difference.
TEST(CkptTool, DiffComparesValuesWhateverTheirContainersTypes) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "types");
  c10::impl::GenericList plain(c10::AnyType::get());
  plain.push_back(int64_t{0});
  plain.push_back(int64_t{1});
  const std::pair<std::string, c10::IValue> files[] = {{"typed.pt", c10::List<int64_t>({0, 1})},
                                                       {"plain.pt", plain}};
  for (const auto& [name, params] : files) {
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    state.insert("params", params);
    const std::vector<char> bytes = torch::pickle_save(state);
    std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const auto r = ckpt_tool({"diff", (dir / "typed.pt").string(), (dir / "plain.pt").string()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "identical: 1 entries (bitwise)")) << r.out;
  fs::remove_all(dir);
}

// --prefix keeps the keys under it, written without it, in every format
// (it was honoured for safetensors only; torch-save wrote every key).
TEST(CkptTool, ConvertWithAPrefixKeepsOnlyItsKeysInEveryFormat) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "prefix");
  ckpt::Checkpoint checkpoint;
  checkpoint.insert("model.weight", at::arange(6, at::kFloat).reshape({2, 3}));
  checkpoint.insert("model.bias", at::ones({2}));
  checkpoint.insert("optimizer.lr", c10::IValue(0.5));
  ckpt::save((dir / "full.pt").string(), checkpoint);
  for (const std::string to : {"torch-save", "sharded"}) {
    const fs::path out = dir / ("weights." + to);
    const auto r = ckpt_tool({"convert", "--to", to, "--prefix", "model.", (dir / "full.pt").string(),
                              out.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("wrote 2 entries"), std::string::npos) << r.out;
    const auto listed = ckpt_tool({"inspect", out.string()});
    EXPECT_NE(listed.out.find("weight"), std::string::npos) << listed.out;
    EXPECT_EQ(listed.out.find("model."), std::string::npos) << listed.out;
    EXPECT_EQ(listed.out.find("lr"), std::string::npos) << listed.out;
  }
  const auto none = ckpt_tool({"convert", "--to", "torch-save", "--prefix", "encoder.",
                               (dir / "full.pt").string(), (dir / "none.pt").string()});
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("no key starts with 'encoder.'"), std::string::npos) << none.err;
  EXPECT_FALSE(fs::exists(dir / "none.pt"));
  fs::remove_all(dir);
}

TEST(CkptTool, BadInputIsOneLineOnStderrAndExit2) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "bad");
  std::ofstream(dir / "text.txt") << "not a checkpoint\n";
  fs::create_directories(dir / "empty");
  fs::create_directories(dir / "managed");
  std::ofstream(dir / "managed" / "latest") << "checkpoint-0000000016.pt\n";
  const std::string missing = (dir / "missing.pt").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "A subcommand is required"},
      {{"frobnicate"}, "unknown command 'frobnicate'; use inspect, verify, convert or diff"},
      {{"inspect"}, "PATH is required"},
      {{"inspect", missing}, "'" + missing + "' does not exist; give a checkpoint file"},
      {{"verify", (dir / "empty").string()}, "is a directory without .metadata, not a sharded checkpoint"},
      {{"inspect", (dir / "managed").string()},
       "is a checkpoint manager's directory; give one of its checkpoints, e.g. its latest, '" +
           (dir / "managed" / "checkpoint-0000000016.pt").string() + "'"},
      {{"diff", (dir / "text.txt").string(), missing}, "is not a checkpoint (not a torch.save zip file)"},
      {{"convert", "--to", "onnx", missing, (dir / "x").string()}, "--to"},
      {{"diff", "--atol", "-1", missing, missing}, "--atol"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = ckpt_tool(args);
    const std::string what = args.empty() ? "(no arguments)" : args[0] + (args.size() > 1 ? " " + args[1] : "");
    EXPECT_EQ(r.status, 2) << what;
    EXPECT_EQ(r.out, "") << what;
    EXPECT_NE(r.err.find(expected), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
    EXPECT_EQ(r.err.rfind("rankwise", 0), 0u) << what << ": " << r.err;
  }
  fs::remove_all(dir);
}

// The optimizer's state is keyed by parameter index: a damaged moment is
// named with it, as inspect names it (optimizer.state.4.exp_avg).
TEST(CkptTool, VerifyNamesADamagedOptimizerMomentWithItsParameterIndex) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "verify_optimizer");
  c10::Dict<std::string, at::Tensor> moments;
  moments.insert("exp_avg", at::arange(500, 520, at::kFloat));
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  state.insert(int64_t{4}, moments);
  c10::impl::GenericDict optimizer(c10::StringType::get(), c10::AnyType::get());
  optimizer.insert("state", state);
  ckpt::Checkpoint checkpoint;
  checkpoint.insert("optimizer", optimizer);
  const auto file = dir / "state.pt";
  ckpt::save(file.string(), checkpoint);
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto values = at::arange(500, 520, at::kFloat);
  const auto at = bytes.find(std::string(static_cast<const char*>(values.data_ptr()), 20 * 4));
  ASSERT_NE(at, std::string::npos);
  flip(file, static_cast<int64_t>(at) + 5);
  const auto r = ckpt_tool({"verify", file.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("(the storage of 'optimizer.state.4.exp_avg'): its bytes' CRC-32 is"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// Every byte of a replicated file flipped in turn: verify exits 1 each
// time, and names what changed: a flip inside a tensor's bytes names the
// entry and its key ('weights', or 'model.bias' inside a nested dict), one
// in data.pkl names the pickle, and any other is said to leave every key's
// bytes intact. (Before: only "checksum mismatch" and the file.)
TEST(CkptTool, VerifyNamesTheKeyOfEveryFlippedByteOfAReplicatedFile) {
  const auto dir = rankwise::test::fresh_dir("rankwise_ckpt_tool", "verify_sweep");
  ckpt::Checkpoint state;
  state.insert("weights", at::arange(100, 124, at::kFloat));
  c10::Dict<std::string, at::Tensor> model;
  model.insert("bias", at::arange(300, 306, at::kFloat));
  state.insert("model", model);
  state.insert("step", int64_t{7});
  const auto file = dir / "state.pt";
  ckpt::save(file.string(), state);
  std::string good;
  {
    std::ifstream in(file, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto bytes_of = [](const at::Tensor& t) {
    return std::string(static_cast<const char*>(t.data_ptr()), static_cast<std::size_t>(t.nbytes()));
  };
  const auto weights_at = good.find(bytes_of(at::arange(100, 124, at::kFloat)));
  const auto bias_at = good.find(bytes_of(at::arange(300, 306, at::kFloat)));
  ASSERT_NE(weights_at, std::string::npos);
  ASSERT_NE(bias_at, std::string::npos);
  int keyed = 0, outside = 0, pickle = 0;
  for (std::size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << bad;
    }
    const auto r = ckpt_tool({"verify", file.string()});
    ASSERT_EQ(r.status, 1) << "byte " << at << "\n" << r.out << r.err;
    const std::string named = "FAILED: " + file.string() + ": ";
    ASSERT_NE(r.out.find(named), std::string::npos) << "byte " << at << "\n" << r.out;
    if (at >= weights_at && at < weights_at + 24 * 4) {
      EXPECT_NE(r.out.find("(the storage of 'weights'): its bytes' CRC-32 is"), std::string::npos)
          << "byte " << at << "\n" << r.out;
      ++keyed;
    } else if (at >= bias_at && at < bias_at + 6 * 4) {
      EXPECT_NE(r.out.find("(the storage of 'model.bias'): its bytes' CRC-32 is"), std::string::npos)
          << "byte " << at << "\n" << r.out;
      ++keyed;
    } else if (r.out.find("no key's bytes changed") != std::string::npos) {
      ++outside;
    } else {
      // The pickle, a header or record of an entry, or the zip's structure:
      // named, never blamed on a key's bytes.
      EXPECT_EQ(r.out.find("(the storage of"), std::string::npos) << "byte " << at << "\n" << r.out;
      if (r.out.find("entry 'archive/data.pkl' (the pickle") != std::string::npos) ++pickle;
    }
  }
  EXPECT_EQ(keyed, 24 * 4 + 6 * 4);
  EXPECT_GT(outside, 0);
  EXPECT_GT(pickle, 0);
  fs::remove_all(dir);
}
