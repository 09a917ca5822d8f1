// Files a user may get from anywhere. Every input that made a fuzz target
// crash (fuzz/, `make fuzz`; see BENCHMARKS.md) is kept here, rebuilt from
// valid files the way the crasher was made, and must fail with a rankwise
// error naming what is wrong, never a crash or a foreign exception.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "checkpoint/pickle/python_pickle.h"
#include "rankwise/checkpoint/checkpoint.h"
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

// A string literal's bytes, NULs included.
template <std::size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

// The bytes rankwise::checkpoint::save writes for `c`.
std::string saved(const rankwise::checkpoint::Checkpoint& c) {
  const fs::path path = scratch("saved.pt");
  rankwise::checkpoint::save(path.string(), c);
  return read_file(path);
}

// `file` (a rankwise checkpoint) with its CRC-32 trailer recomputed, as a
// crafted file would carry it: the last 8 characters are the hex digits.
std::string resigned(std::string file) {
  const std::size_t covered = file.size() - 34;  // "rankwise-checkpoint crc32=" + 8 digits
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x",
                static_cast<unsigned>(crc32_z(0, reinterpret_cast<const Bytef*>(file.data()), covered)));
  file.replace(file.size() - 8, 8, hex);
  return file;
}

// A zip as torch.save writes it (no rankwise checksum) holding `pickle` as data.pkl.
std::string zip_with_pickle(const std::string& pickle) {
  std::string zip;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t n) {
    zip.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeEndOfFile();
  return zip;
}

// `pickle` as data.pkl of a file with a valid rankwise checksum, made as a
// crafted file would be: the zip above, its archive comment a trailer.
std::string signed_zip_with_pickle(const std::string& pickle) {
  std::string zip = zip_with_pickle(pickle);
  zip[zip.size() - 2] = 34;  // the end record's comment length (its last two bytes)
  return resigned(zip + "rankwise-checkpoint crc32=00000000");
}

// `bytes` with the first `from` replaced by `to` (of the same length).
std::string replaced(std::string bytes, const std::string& from, const std::string& to) {
  const auto at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

std::string load_error(const std::string& name, const std::string& bytes) {
  const fs::path path = write_file(name, bytes);
  return error_of<rankwise::CheckpointError>([&] { rankwise::checkpoint::load(path.string()); });
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
  return error_of<rankwise::ConfigError>([&] { rankwise::data::read_idx(path.string()); });
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

// fuzz_checkpoint_crc: a rankwise checkpoint with a valid checksum whose
// pickle says a tensor is bigger than the record holding its data (a 3-element
// Half tensor relabelled LongStorage: 24 bytes over a 6-byte record). libtorch's
// unpickler built it; reading it went past the record (ASan: heap-buffer-overflow).
TEST(UntrustedCheckpoint, TensorLargerThanItsRecordIsRefused) {
  rankwise::checkpoint::Checkpoint c;
  c.insert("h", torch::ones({3}, torch::kFloat16));
  const std::string crafted = resigned(replaced(saved(c), "HalfStorage", "LongStorage"));
  const std::string error = load_error("oversized.pt", crafted);
  EXPECT_NE(error.find("holds a long int tensor of shape [3], strides [1] and offset 0, which "
                       "does not fit in its storage record of 6 bytes"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("oversized.pt"), std::string::npos) << error;
}

// The same through the path of Python's torch.save files (no checksum).
TEST(UntrustedCheckpoint, TensorLargerThanItsRecordIsRefusedWithoutChecksum) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("h", torch::ones({3}, torch::kFloat16));
  const auto plain = torch::pickle_save(dict);
  const std::string crafted =
      replaced(std::string(plain.begin(), plain.end()), "HalfStorage", "LongStorage");
  const std::string error = load_error("oversized_python.pt", crafted);
  EXPECT_NE(error.find("does not fit in its storage record of 6 bytes"), std::string::npos) << error;
}

// fuzz_checkpoint_crc run without the guard (check_pickle before libtorch's
// unpickler, on rankwise's own files): a memo index of 2^31 made libtorch
// grow its memo table to 32 GiB (libFuzzer: out-of-memory, malloc(20 GB)).
TEST(UntrustedCheckpoint, HugeMemoIndexIsRefusedBeforeLibtorchAllocates) {
  const std::string error =
      load_error("memo.pt", signed_zip_with_pickle(bytes("\x80\x02K\x01r\xff\xff\xff\x7f.")));
  EXPECT_NE(error.find("memo index 2147483647 is out of range"), std::string::npos) << error;
  EXPECT_NE(error.find("memo.pt"), std::string::npos) << error;
}

// Likewise: a string that declares 2 GiB in a pickle of a few bytes, which
// libtorch allocated before finding the pickle too short (out-of-memory, and
// 11 s per input).
TEST(UntrustedCheckpoint, StringLongerThanThePickleIsRefused) {
  const std::string error =
      load_error("string.pt", signed_zip_with_pickle(bytes("\x80\x02X\xff\xff\xff\x7f" "abc.")));
  EXPECT_NE(error.find("string.pt' with libtorch: it is truncated"),
            std::string::npos)
      << error;
}

// The rules the guard enforces so that libtorch's unpickler, which does not
// check them, never pops an empty stack or reads past its end: a TUPLE
// without MARK, a DICT with a key but no value.
TEST(UntrustedCheckpoint, MalformedPicklesAreRefusedBeforeLibtorchReadsThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {bytes("\x80\x02t."), "TUPLE without a MARK"},
      {bytes("\x80\x02(K\x01" "d."), "a key without a value"},
      {bytes("\x80\x02K\x01K\x02."), "STOP leaves 2 items and 0 MARKs, not one item"},
  };
  for (const auto& [pickle, expected] : cases) {
    const std::string error = load_error("malformed.pt", signed_zip_with_pickle(pickle));
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  }
}

// Found reviewing the guard (the fuzzers' inputs stay near 4 KB): lists
// nested 200,000 deep, a 600 KB pickle. libtorch unpickles them without
// recursion but destroys them recursively: the stack overflowed (SIGSEGV in
// ~DictImpl), through either path.
TEST(UntrustedCheckpoint, ValuesNestedTooDeepAreRefused) {
  std::string pickle = bytes("\x80\x02}(X\x01\x00\x00\x00" "a");
  for (int i = 0; i < 200000; ++i) pickle += "](";
  pickle += "]" + std::string(200000, 'e') + "u.";
  for (const std::string& file : {zip_with_pickle(pickle), signed_zip_with_pickle(pickle)}) {
    const std::string error = load_error("deep.pt", file);
    EXPECT_NE(error.find("its values are nested deeper than 1000 levels"), std::string::npos)
        << error;
  }
}

// fuzz_python_pickle: BINPUT of OrderedDict's empty argument tuple. The
// rewrite drops that tuple (OrderedDict() becomes EMPTY_DICT) but kept the
// BINPUT, an opcode on an empty stack for libtorch's unpickler.
TEST(UntrustedCheckpoint, RewriterRefusesAMemoOfOrderedDictArguments) {
  const std::string pickle = bytes("\x80\x02" "ccollections\nOrderedDict\n)q\x00R.");
  const std::string error = error_of<rankwise::CheckpointError>(
      [&] { rankwise::checkpoint::pickle::adapt_python_pickle(pickle.data(), pickle.size(), "x.pkl"); });
  EXPECT_NE(error.find("collections.OrderedDict is used other than as OrderedDict()"),
            std::string::npos)
      << error;
}

// Found reviewing what the rewriter's fix touches: a pickle can make a dict
// that contains itself (d["a"] = d through the memo). Removing the rewriter's
// helper key recursed over it until the stack overflowed.
TEST(UntrustedCheckpoint, DictThatContainsItselfLoads) {
  const std::string pickle = bytes("\x80\x02}q\x00(X\x01\x00\x00\x00" "ah\x00u.");
  const fs::path path = write_file("cyclic.pt", zip_with_pickle(pickle));
  const rankwise::checkpoint::Checkpoint loaded = rankwise::checkpoint::load(path.string());
  EXPECT_EQ(loaded.keys(), std::vector<std::string>{"a"});
  auto inner = loaded.at("a").toGenericDict();
  EXPECT_TRUE(inner.contains("a"));
  (void)inner.erase("a");  // break the cycle, so that the test does not leak it
}

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

// Found by a new user: Python pickles an int with the fewest bytes (LONG1 of
// 6 bytes for 2**40, pickle.dumps(2**40, 2)), libtorch reads LONG1 only of 8
// bytes ("Expected length to be 8, got 6"): the rewrite sign-extends it.
TEST(UntrustedCheckpoint, PythonIntsBeyondInt32LoadAndBeyondInt64AreRefused) {
  const std::string pickle = bytes(
      "\x80\x02}q\x00(X\x03\x00\x00\x00" "bigq\x01\x8a\x06\x00\x00\x00\x00\x00\x01"
      "X\x03\x00\x00\x00negq\x02\x8a\x06\x00\x00\x00\x00\x00\xff"
      "X\x04\x00\x00\x00zeroq\x03\x8a\x00u.");
  const auto path = write_file("long1.pt", zip_with_pickle(pickle));
  const rankwise::checkpoint::Checkpoint c = rankwise::checkpoint::load(path.string());
  EXPECT_EQ(c.at("big").toInt(), int64_t{1} << 40);
  EXPECT_EQ(c.at("neg").toInt(), -(int64_t{1} << 40));
  EXPECT_EQ(c.at("zero").toInt(), 0);
  // 2**64 (pickle.dumps(2**64, 2)): 9 bytes, no int64 holds it.
  const std::string huge = load_error("huge.pt", zip_with_pickle(bytes("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.")));
  EXPECT_NE(huge.find("an int of 9 bytes does not fit in int64"), std::string::npos) << huge;
}
