// rankwise::checkpoint::verify() and rankwise::checkpoint::load() on arbitrary bytes.
//
// fuzz_checkpoint feeds the bytes as they are: the CRC-32 trailer rejects
// almost every mutation of a rankwise checkpoint, but a file without a
// trailer (Python's torch.save) goes through the zip reader, the
// Python-pickle rewriter and libtorch's unpickler unverified.
// fuzz_checkpoint_crc (RANKWISE_FUZZ_FIX_CHECKSUM) first gives the bytes a
// valid trailer, as a malicious file would carry, so mutations of rankwise's
// own checkpoints reach the zip reader and the unpickler.
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz_input.h"
#include "rankwise/checkpoint/checkpoint.h"

namespace {

#if RANKWISE_FUZZ_FIX_CHECKSUM
// The layout of checkpoint_file.h: [zip ... EOCD (22 bytes, comment length
// 34)]["rankwise-checkpoint crc32=" + 8 hex digits], the CRC over all before.
constexpr char kMarker[] = "rankwise-checkpoint crc32=";
constexpr std::size_t kTrailer = sizeof(kMarker) - 1 + 8;
constexpr std::size_t kEocd = 22;

// The input (a checkpoint with or without its trailer) with its last 22 bytes
// made an end-of-central-directory record announcing the comment, and a
// trailer holding the CRC-32 of everything before it.
std::string with_valid_checksum(std::string bytes) {
  if (bytes.size() >= kTrailer && bytes.compare(bytes.size() - kTrailer, kTrailer - 8, kMarker) == 0) {
    bytes.resize(bytes.size() - kTrailer);
  }
  if (bytes.size() < kEocd) return bytes;
  char* eocd = &bytes[bytes.size() - kEocd];
  eocd[0] = 'P'; eocd[1] = 'K'; eocd[2] = 5; eocd[3] = 6;
  eocd[20] = static_cast<char>(kTrailer);
  eocd[21] = 0;
  const auto crc = crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc));
  return bytes + kMarker + hex;
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static rankwise_fuzz::InputFile file("checkpoint");
  std::string bytes(reinterpret_cast<const char*>(data), size);
#if RANKWISE_FUZZ_FIX_CHECKSUM
  bytes = with_valid_checksum(std::move(bytes));
  // To keep a crasher as the file the loader saw: RANKWISE_FUZZ_SAVE=path.
  if (const char* save = std::getenv("RANKWISE_FUZZ_SAVE")) {
    std::ofstream(save, std::ios::binary) << bytes;
  }
#endif
  file.write(bytes.data(), bytes.size());
  rankwise_fuzz::only_rankwise_errors("rankwise::verify", [&] { (void)rankwise::checkpoint::verify(file.path()); });
  rankwise_fuzz::only_rankwise_errors("rankwise::load", [&] {
    const rankwise::checkpoint::Checkpoint loaded = rankwise::checkpoint::load(file.path());
    rankwise_fuzz::touch(c10::IValue(loaded.dict()));
  });
  return 0;
}
