// Checkpoint files: round trip, CRC-32 verification, truncation, tampering,
// the writer lock, failed saves keeping the previous file, bad paths.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>
#include <zlib.h>

#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/torch_save/stored_zip.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/error.h"

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("rankwise_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

rankwise::checkpoint::Checkpoint sample(float value) {
  rankwise::checkpoint::Checkpoint c;
  c.insert("weights", torch::full({256, 64}, value));
  c.insert("counts", torch::arange(10, torch::kInt64));
  c.insert("step", int64_t{42});
  c.insert("lr", 0.125);
  c.insert("name", std::string("mlp"));
  return c;
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const rankwise::CheckpointError& e) {
    return e.what();
  }
  return "(no CheckpointError)";
}

}  // namespace

TEST(Checkpoint, RoundTripIsExact) {
  auto dir = fresh_dir("roundtrip");
  const auto path = (dir / "a.pt").string();
  rankwise::checkpoint::save(path, sample(1.5f));
  EXPECT_TRUE(rankwise::checkpoint::verify(path));
  auto back = rankwise::checkpoint::load(path);
  EXPECT_EQ(back.keys(), (std::vector<std::string>{"weights", "counts", "step", "lr", "name"}));
  EXPECT_TRUE(torch::equal(back.at("weights").toTensor(), torch::full({256, 64}, 1.5f)));
  EXPECT_TRUE(torch::equal(back.at("counts").toTensor(), torch::arange(10, torch::kInt64)));
  EXPECT_EQ(back.at("step").toInt(), 42);
  EXPECT_EQ(back.at("lr").toDouble(), 0.125);
  EXPECT_EQ(back.at("name").toStringRef(), "mlp");
  // No temporary file left, and the lock file is the only companion.
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a.pt", "a.pt.lock"}));
  fs::remove_all(dir);
}

// What torch.save keeps: views keep their offsets and strides and share
// their storage; every dtype and shape, 0-d and empty included; storages of
// odd sizes above the writer's 1 MiB piece.
TEST(Checkpoint, ViewsSharedStoragesAndEveryShapeRoundTrip) {
  auto dir = fresh_dir("views");
  const auto path = (dir / "v.pt").string();
  torch::manual_seed(3);
  const auto base = torch::randint(0, 256, {(1 << 20) + 3}, torch::kUInt8);
  const auto rows = torch::rand({37, 53}, torch::kFloat64);
  rankwise::checkpoint::Checkpoint c;
  c.insert("base", base);
  c.insert("slice", base.slice(0, 10, 100));
  c.insert("strided", base.slice(0, 5, 1000, 3));
  c.insert("transposed", rows.t());
  c.insert("scalar", torch::tensor(3.5, torch::kFloat64));
  c.insert("empty", torch::empty({0, 4}));
  c.insert("bf16", torch::rand({5}).to(torch::kBFloat16));
  c.insert("mask", torch::rand({7}) > 0.5);
  c.insert("nested", c10::List<at::Tensor>({torch::ones({2}), torch::arange(3)}));
  rankwise::checkpoint::save(path, c);
  const auto back = rankwise::checkpoint::load(path);
  for (const auto& key : c.keys()) {
    if (key == "nested") continue;
    const auto want = c.at(key).toTensor();
    const auto got = back.at(key).toTensor();
    EXPECT_TRUE(torch::equal(got, want)) << key;
    EXPECT_EQ(got.dtype(), want.dtype()) << key;
    EXPECT_EQ(got.sizes(), want.sizes()) << key;
    EXPECT_EQ(got.strides(), want.strides()) << key;
    EXPECT_EQ(got.storage_offset(), want.storage_offset()) << key;
  }
  const auto base_back = back.at("base").toTensor();
  EXPECT_TRUE(back.at("slice").toTensor().storage().is_alias_of(base_back.storage()));
  EXPECT_TRUE(back.at("strided").toTensor().storage().is_alias_of(base_back.storage()));
  const auto nested = back.at("nested").toList();
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_TRUE(torch::equal(nested.get(1).toTensor(), torch::arange(3)));
  fs::remove_all(dir);
}

// Files that rankwise wrote before it had its own archive writer (with
// PyTorch's PyTorchStreamWriter: storages before data.pkl, miniz's layout),
// with the same trailer: they still verify and load.
TEST(Checkpoint, FilesOfTheEarlierWriterStillLoad) {
  auto dir = fresh_dir("earlier");
  const auto path = (dir / "old.pt").string();
  const auto state = sample(2.5f);
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* d, std::size_t n) { pickle.insert(pickle.end(), d, d + n); });
  pickler.protocol();
  pickler.pushIValue(c10::IValue(state.dict()));
  pickler.stop();
  std::string bytes;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* d, std::size_t n) {
      bytes.append(static_cast<const char*>(d), n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
    writer.writeEndOfFile();
  }
  const std::string marker = "rankwise-checkpoint crc32=";
  ASSERT_EQ(bytes.substr(bytes.size() - 22, 4), std::string("PK\x05\x06", 4));
  bytes[bytes.size() - 2] = static_cast<char>(marker.size() + 8);  // the comment's length
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x",
                static_cast<unsigned>(::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()),
                                              static_cast<uInt>(bytes.size()))));
  write_bytes(path, bytes + marker + crc);
  EXPECT_TRUE(rankwise::checkpoint::verify(path));
  const auto back = rankwise::checkpoint::load(path);
  EXPECT_TRUE(torch::equal(back.at("weights").toTensor(), torch::full({256, 64}, 2.5f)));
  EXPECT_EQ(back.at("name").toStringRef(), "mlp");
  // And a flipped byte in it is still caught.
  bytes[bytes.size() / 2] ^= 1;
  write_bytes(path, bytes + marker + crc);
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load(path); }).find("is corrupt"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, EveryAlteredByteIsDetected) {
  // Every entry kind of sample(), with a tensor small enough (4 x 4 float)
  // that every byte of the file can be altered in turn: zip local headers and
  // their padding, the pickle, tensor data, central directory, end record,
  // checksum comment.
  auto dir = fresh_dir("altered");
  const auto path = dir / "a.pt";
  rankwise::checkpoint::Checkpoint small = sample(2.0f);
  small.insert("weights", torch::full({4, 4}, 2.0f));
  rankwise::checkpoint::save(path.string(), small);
  const std::string good = bytes_of(path);
  ASSERT_EQ(good.rfind("PK\x03\x04", 0), 0u);  // a zip, starting with a local header
  ASSERT_NE(good.find("rankwise-checkpoint crc32="), std::string::npos);
  // Each byte altered two ways (lowest bit, highest bit): load() throws a
  // CheckpointError naming the file and verify() throws too.
  std::size_t detected = 0;
  std::vector<std::size_t> missed, not_crc_first;
  const std::size_t prefix = good.size() - std::string("rankwise-checkpoint crc32=00000000").size();
  // The byte is overwritten in place (no truncation: a truncated and
  // rewritten file is flushed to disk at close on ext4, seconds per thousand).
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  const auto put = [&](std::size_t offset, char byte) {
    file.seekp(static_cast<std::streamoff>(offset));
    file.put(byte);
    file.flush();
  };
  for (std::size_t offset = 0; offset < good.size(); ++offset) {
    for (const unsigned char mask : {0x01, 0x80}) {
      put(offset, static_cast<char>(good[offset] ^ mask));
      const std::string load_error = error_of([&] { rankwise::checkpoint::load(path.string()); });
      const bool load_caught = load_error.find(path.string()) != std::string::npos;
      // In the checksummed prefix the CRC's verdict comes first, even though it runs beside the
      // unpickling, which may fail on the same byte (or the trailer's, for the end record's bytes
      // that announce it).
      if (offset < prefix && load_error.find("is corrupt: recorded CRC-32") == std::string::npos &&
          load_error.find("checksum record") == std::string::npos && not_crc_first.size() < 20) {
        not_crc_first.push_back(offset);
      }
      const bool verify_caught =
          error_of([&] { rankwise::checkpoint::verify(path.string()); }) != "(no CheckpointError)";
      if (load_caught && verify_caught) {
        ++detected;
      } else if (missed.size() < 20) {
        missed.push_back(offset);
      }
    }
    put(offset, good[offset]);
  }
  file.close();
  ASSERT_EQ(bytes_of(path), good);
  EXPECT_TRUE(rankwise::checkpoint::verify(path.string()));
  EXPECT_EQ(detected, 2 * fs::file_size(path))
      << "file of " << good.size() << " bytes; first undetected offsets: "
      << ::testing::PrintToString(missed);
  EXPECT_TRUE(not_crc_first.empty()) << "altered bytes not reported as a CRC mismatch: "
                                     << ::testing::PrintToString(not_crc_first);
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptTensorDataNamesTheChecksum) {
  auto dir = fresh_dir("corrupt");
  const auto path = dir / "a.pt";
  rankwise::checkpoint::save(path.string(), sample(3.0f));
  std::string bytes = bytes_of(path);
  bytes[bytes.size() / 2] ^= 0x01;  // inside the 64 KiB tensor
  write_bytes(path, bytes);
  const std::string error = error_of([&] { rankwise::checkpoint::load(path.string()); });
  EXPECT_NE(error.find("is corrupt: recorded CRC-32"), std::string::npos) << error;
  EXPECT_NE(error.find("load the previous checkpoint"), std::string::npos) << error;
  fs::remove_all(dir);
}

TEST(Checkpoint, TruncatedFilesAreErrorsNeverCrashes) {
  auto dir = fresh_dir("truncated");
  const auto path = dir / "a.pt";
  rankwise::checkpoint::save(path.string(), sample(4.0f));
  const std::string good = bytes_of(path);
  for (std::size_t size : {std::size_t{0}, std::size_t{10}, std::size_t{100}, good.size() / 3,
                           good.size() / 2, good.size() - 100, good.size() - 34, good.size() - 1}) {
    write_bytes(path, good.substr(0, size));
    const std::string error = error_of([&] { rankwise::checkpoint::load(path.string()); });
    EXPECT_NE(error.find(path.string()), std::string::npos) << "size " << size << ": " << error;
    // verify() throws too: false is only for a complete file without a checksum.
    const std::string verify_error = error_of([&] { rankwise::checkpoint::verify(path.string()); });
    EXPECT_NE(verify_error.find(path.string()), std::string::npos) << "size " << size << ": " << verify_error;
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, FileWithoutChecksumStillLoads) {
  // What torch::pickle_save (like Python's torch.save) writes: no checksum comment.
  auto dir = fresh_dir("nochecksum");
  const auto path = dir / "plain.pt";
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("x", torch::ones({3}));
  const auto bytes = torch::pickle_save(dict);
  write_bytes(path, std::string(bytes.begin(), bytes.end()));
  EXPECT_FALSE(rankwise::checkpoint::verify(path.string()));
  EXPECT_TRUE(torch::equal(rankwise::checkpoint::load(path.string()).at("x").toTensor(), torch::ones({3})));
  fs::remove_all(dir);
}

// A zip of torch.save's records whose last bytes, before the end record,
// are an entry name ending in "rankwise-checkpoint/version" (torch 1.x names
// the archive after the file's stem; a zip writer without zip64 end
// records puts the last name right before the end record): not a damaged
// rankwise trailer, but a file without a checksum.
// A zip that torch.save did not write: verify() throws as load() does (it
// once returned false, "no checksum", for any zip).
TEST(Checkpoint, AZipWithoutAPickleIsNotACheckpoint) {
  auto dir = fresh_dir("otherzip");
  const auto path = (dir / "notes.zip").string();
  rankwise::checkpoint::torch_save::StoredZip zip;
  std::string bytes = zip.entry("notes/readme.txt", "hello\n");
  bytes += zip.finish();
  write_bytes(path, bytes);
  for (const bool verify : {false, true}) {
    const std::string error =
        error_of([&] { verify ? (void)rankwise::checkpoint::verify(path) : (void)rankwise::checkpoint::load(path); });
    EXPECT_NE(error.find("'" + path + "' is not a readable checkpoint"), std::string::npos) << error;
    EXPECT_EQ(error.find("[enforce fail"), std::string::npos) << error;
  }
  fs::remove_all(dir);
}

// An undefined tensor (a default-constructed at::Tensor, e.g. a gradient
// never computed) cannot be saved: the error names its key, at top level
// and inside a list or dict, and nothing is written.
TEST(Checkpoint, AnUndefinedTensorIsNamedByItsKey) {
  auto dir = fresh_dir("undefined");
  const auto path = (dir / "a.pt").string();
  c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
  inner.insert("grad", at::Tensor());
  c10::List<at::Tensor> list({torch::ones({1}), at::Tensor()});
  const std::vector<std::pair<c10::IValue, std::string>> cases = {
      {c10::IValue(at::Tensor()), "'w'"},
      {c10::IValue(inner), "'w' -> 'grad'"},
      {c10::IValue(list), "'w'[1]"}};
  for (const auto& [value, where] : cases) {
    rankwise::checkpoint::Checkpoint state;
    state.insert("step", 1);
    state.insert("w", value);
    const std::string error = error_of([&] { rankwise::checkpoint::save(path, state); });
    EXPECT_NE(error.find("the tensor at " + where + " is undefined"), std::string::npos) << error;
    EXPECT_FALSE(fs::exists(path));
  }
  fs::remove_all(dir);
}

// save() to a path that is a directory: the error says so (it once advised
// checking that the directory exists) and the directory is left as it was.
TEST(Checkpoint, SaveToADirectorySaysItIsADirectory) {
  auto dir = fresh_dir("savedir");
  fs::create_directory(dir / "runs");
  const std::string error = error_of([&] { rankwise::checkpoint::save((dir / "runs").string(), sample(1.0f)); });
  EXPECT_NE(error.find("'" + (dir / "runs").string() + "' is a directory"), std::string::npos) << error;
  EXPECT_NE(error.find("give the path of a file in it"), std::string::npos) << error;
  EXPECT_EQ(error.find("(raised on rank"), std::string::npos) << "no process group, no rank to name: " << error;
  EXPECT_TRUE(fs::is_directory(dir / "runs"));
  EXPECT_TRUE(fs::is_empty(dir / "runs"));
  EXPECT_FALSE(fs::exists(dir / "runs.lock"));
  const std::string check = error_of([&] { rankwise::checkpoint::check_checkpoint_path((dir / "runs").string()); });
  EXPECT_NE(check.find("is a directory"), std::string::npos) << check;
  fs::remove_all(dir);
}

TEST(Checkpoint, ArchiveNamedLikeTheMarkerStillLoads) {
  auto dir = fresh_dir("stem");
  const auto path = (dir / "old_rankwise-checkpoint.pt").string();
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("x", torch::ones({3}));
  std::string pickle;
  torch::jit::Pickler pickler([&](const char* d, std::size_t n) { pickle.append(d, n); });
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  ASSERT_EQ(pickler.tensorData().size(), 1u);
  const at::Tensor& t = pickler.tensorData()[0];
  rankwise::checkpoint::torch_save::StoredZip zip;
  const std::string archive = "old_rankwise-checkpoint/";
  std::string bytes = zip.entry(archive + "data.pkl", pickle);
  bytes += zip.entry(archive + "data/0", std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()));
  bytes += zip.entry(archive + "version", "3\n");
  bytes += zip.finish();
  ASSERT_NE(bytes.substr(bytes.size() - 56).find("rankwise-checkpoint"), std::string::npos);
  write_bytes(path, bytes);
  EXPECT_FALSE(rankwise::checkpoint::verify(path));
  EXPECT_TRUE(torch::equal(rankwise::checkpoint::load(path).at("x").toTensor(), torch::ones({3})));
  fs::remove_all(dir);
}

TEST(Checkpoint, ConcurrentWriterIsRefusedAndPreviousFileKept) {
  auto dir = fresh_dir("locked");
  const auto path = (dir / "a.pt").string();
  rankwise::checkpoint::save(path, sample(5.0f));
  // Another writer holds the lock (flock is per open file, so this conflicts
  // even within one process).
  int fd = ::open((path + ".lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ASSERT_EQ(::pwrite(fd, "4242@otherhost\n", 15, 0), 15);
  const std::string error = error_of([&] { rankwise::checkpoint::save(path, sample(6.0f)); });
  EXPECT_NE(error.find("checkpoint '" + path + "' is being written by process 4242@otherhost"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("refusing to write it concurrently"), std::string::npos) << error;
  ::close(fd);
  EXPECT_TRUE(torch::equal(rankwise::checkpoint::load(path).at("weights").toTensor(),
                           torch::full({256, 64}, 5.0f)));
  rankwise::checkpoint::save(path, sample(7.0f));  // the lock is free again
  EXPECT_TRUE(torch::equal(rankwise::checkpoint::load(path).at("weights").toTensor(),
                           torch::full({256, 64}, 7.0f)));
  fs::remove_all(dir);
}

// What a save killed mid-write left beside the file (AtomicFile's temporary)
// is removed by the next save, which holds the lock; another file's is not.
TEST(Checkpoint, TheNextSaveRemovesWhatAKilledSaveLeft) {
  auto dir = fresh_dir("leftover");
  const auto path = (dir / "a.pt").string();
  write_bytes(dir / "a.pt.tmp.4242.Ab12Cd", "half a checkpoint");
  write_bytes(dir / "ab.pt.tmp.4242.Ab12Cd", "another file's");
  // Only AtomicFile's names, and only files: a directory or a user's file named alike stays.
  fs::create_directories(dir / "a.pt.tmp.3.dirabc" / "inside");
  write_bytes(dir / "a.pt.tmp.notes", "a user's");
  testing::internal::CaptureStderr();
  rankwise::checkpoint::save(path, sample(1.0f));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(dir / "a.pt.tmp.4242.Ab12Cd"));
  EXPECT_TRUE(fs::exists(dir / "ab.pt.tmp.4242.Ab12Cd"));
  EXPECT_TRUE(fs::exists(dir / "a.pt.tmp.3.dirabc" / "inside"));
  EXPECT_TRUE(fs::exists(dir / "a.pt.tmp.notes"));
  EXPECT_NE(err.find("removed what an interrupted save left beside it: a.pt.tmp.4242.Ab12Cd"), std::string::npos)
      << err;
  EXPECT_TRUE(rankwise::checkpoint::verify(path));
  fs::remove_all(dir);
}

TEST(Checkpoint, BadPathsAreClearErrors) {
  EXPECT_NE(error_of([] { rankwise::checkpoint::save("/nonexistent-rankwise-dir/a.pt", sample(1)); })
                .find("'/nonexistent-rankwise-dir/a.pt.lock'"),
            std::string::npos);
  // /proc refuses new files even for root.
  const std::string ro = error_of([] { rankwise::checkpoint::save("/proc/rankwise-a.pt", sample(1)); });
  EXPECT_NE(ro.find("/proc/rankwise-a.pt"), std::string::npos) << ro;
  EXPECT_NE(error_of([] { rankwise::checkpoint::check_checkpoint_path("/nonexistent-rankwise-dir/a.pt"); })
                .find("does not exist or is not writable"),
            std::string::npos);
  EXPECT_NE(error_of([] { rankwise::checkpoint::load("/nonexistent-rankwise-dir/a.pt"); })
                .find("cannot open checkpoint '/nonexistent-rankwise-dir/a.pt'"),
            std::string::npos);
  auto dir = fresh_dir("notckpt");
  write_bytes(dir / "text.pt", "hello, this is not a zip file at all\n");
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load((dir / "text.pt").string()); })
                .find("is not a readable checkpoint"),
            std::string::npos);
  // A directory: a sharded checkpoint is pointed to rankwise::checkpoint::load_sharded.
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load(dir.string()); }).find("is a directory, not a checkpoint file"),
            std::string::npos);
  write_bytes(dir / ".metadata", "");
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load(dir.string()); })
                .find("is a directory: a sharded checkpoint; read it with rankwise::checkpoint::load_sharded"),
            std::string::npos)
      << error_of([&] { rankwise::checkpoint::load(dir.string()); });
  fs::remove_all(dir);
}
