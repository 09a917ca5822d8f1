// Sharded checkpoints from anywhere (a Python dcp.save directory carries no
// checksums, a crafted one can carry valid ones): every truncation and many
// byte flips of `.metadata` and of a data file, fed to the readers, must be
// refused with a rankwise error or read cleanly, never crash, hang or throw
// a foreign exception. A deterministic sweep, in `make test`.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/sharded/dcp_metadata.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "support/workers.h"

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) { return rankwise::test::fresh_dir("rankwise_untrusted_sharded", name); }

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

rankwise::checkpoint::ShardedState state(bool targets) {
  rankwise::checkpoint::ShardedState s;
  const auto value = [&](at::Tensor t) { return targets ? at::zeros_like(t) : t; };
  s.emplace("w", rankwise::checkpoint::shard_rows(value(at::arange(12, at::kFloat).reshape({4, 3})), 0, 1));
  s.emplace("ids", rankwise::checkpoint::shard_flat(value(at::arange(5, at::kLong)), 0, 1));
  s.emplace("half", rankwise::checkpoint::shard_rows(value(at::ones({3}, at::kBFloat16)), 0, 1));
  s.emplace("scale", value(at::full({2}, 0.5, at::kDouble)));
  s.emplace("lr", rankwise::checkpoint::ObjectEntry{targets ? c10::IValue() : c10::IValue(0.25)});
  s.emplace("name", rankwise::checkpoint::ObjectEntry{targets ? c10::IValue() : c10::IValue(std::string("run"))});
  return s;
}

// Whether f returned (true) or threw a rankwise::Error (false); anything else fails the test.
template <typename F>
bool clean(F&& f, const std::string& what) {
  try {
    f();
    return true;
  } catch (const rankwise::Error&) {
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": a foreign exception: " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << ": a non-std exception";
  }
  return false;
}

}  // namespace

TEST(UntrustedSharded, EveryTruncationAndByteFlipOfMetadataIsACleanError) {
  const auto dir = fresh_dir("metadata") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), state(false));
  const std::string metadata = read_bytes(dir / ".metadata");
  ASSERT_GT(metadata.size(), 500u);
  int read_cleanly = 0;
  for (std::size_t n = 0; n < metadata.size(); ++n) {
    EXPECT_FALSE(clean([&] { rankwise::checkpoint::sharded::unpickle_dcp_metadata(metadata.substr(0, n), "m"); },
                       "truncated to " + std::to_string(n)))
        << "a .metadata truncated to " << n << " bytes was read";
  }
  for (std::size_t i = 0; i < metadata.size(); ++i) {
    for (const unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string m = metadata;
      m[i] = static_cast<char>(static_cast<unsigned char>(m[i]) ^ mask);
      read_cleanly += clean([&] { rankwise::checkpoint::sharded::unpickle_dcp_metadata(m, "m"); },
                            "byte " + std::to_string(i) + " ^ " + std::to_string(mask));
    }
  }
  // Most flips land in names, numbers and shapes: read, as pickle allows; the
  // sweep is about the rest. A flip of the first byte (PROTO) or of the last
  // (STOP) leaves no pickle, and must be refused.
  for (const std::size_t i : {std::size_t{0}, metadata.size() - 1}) {
    for (const unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string m = metadata;
      m[i] = static_cast<char>(static_cast<unsigned char>(m[i]) ^ mask);
      EXPECT_FALSE(clean([&] { rankwise::checkpoint::sharded::unpickle_dcp_metadata(m, "m"); },
                         "byte " + std::to_string(i)))
          << "byte " << i << " ^ " << int(mask) << " was read";
    }
  }
  EXPECT_LT(read_cleanly, static_cast<int>(3 * metadata.size()));
  fs::remove_all(dir.parent_path());
}

TEST(UntrustedSharded, DamagedDataFilesWithoutAManifestAreCleanErrorsOrReadValues) {
  const auto dir = fresh_dir("data") / "ckpt";
  rankwise::checkpoint::save_sharded(dir.string(), state(false));
  fs::remove(dir / ".rankwise-manifest.json");  // as Python's dcp.save writes it: nothing verified
  const fs::path file = dir / "__0_0.distcp";
  const std::string data = read_bytes(file);
  ASSERT_GT(data.size(), 1000u);
  for (std::size_t n = 0; n < data.size(); n += 7) {
    write_bytes(file, data.substr(0, n));
    auto targets = state(true);
    EXPECT_FALSE(clean([&] { rankwise::checkpoint::load_sharded(dir.string(), targets); }, "truncated to " + std::to_string(n)))
        << "a data file truncated to " << n << " of " << data.size() << " bytes was read";
  }
  for (std::size_t i = 0; i < data.size(); ++i) {
    std::string d = data;
    d[i] = static_cast<char>(static_cast<unsigned char>(d[i]) ^ 0xff);
    write_bytes(file, d);
    auto targets = state(true);
    clean([&] { rankwise::checkpoint::load_sharded(dir.string(), targets); }, "byte " + std::to_string(i) + " flipped");
  }
  fs::remove_all(dir.parent_path());
}
