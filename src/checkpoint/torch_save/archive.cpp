#include "checkpoint/torch_save/archive.h"

#include "core/check.h"

#include <algorithm>

#include "checkpoint/torch_save/stored_zip.h"
#include "util/crc32.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::torch_save {

uint32_t WrittenArchive::crc32_of(std::size_t first, std::size_t last) const {
  uint32_t crc = 0;
  for (std::size_t i = first; i < last && i < parts.size(); ++i) {
    crc = util::crc32_combine_lengths(crc, parts[i].crc32, parts[i].size);
  }
  return crc;
}

WrittenArchive write_torch_save_archive(const std::string& pickle, const std::vector<StorageWriter>& storages,
                                        const ByteSink& sink, uint16_t comment_length) {
  WrittenArchive out;
  auto emit = [&](const std::string& bytes) {
    out.parts.push_back({out.length, bytes.size(), util::crc32_update(0, bytes.data(), bytes.size()), -1});
    out.length += bytes.size();
    sink(bytes.data(), bytes.size());
  };
  StoredZip zip;
  const std::string archive = "archive/";
  // One call each: the zip's cursor advances in the order the bytes are written.
  std::string head = zip.entry(archive + "data.pkl", pickle);
  head += zip.entry(archive + ".format_version", "1");
  head += zip.entry(archive + ".storage_alignment", std::to_string(StoredZip::kAlignment));
  head += zip.entry(archive + "byteorder", "little");  // x86-64 and aarch64 Linux
  for (std::size_t i = 0; i < storages.size(); ++i) {
    const StorageWriter& storage = storages[i];
    head += zip.begin(archive + "data/" + std::to_string(i), storage.size);
    emit(head);
    head.clear();
    uint64_t handed = 0;
    const uint32_t crc = storage.write([&](const char* data, std::size_t n) {
      handed += n;
      if (handed > storage.size) return;  // reported below, before anything else is written
      sink(data, n);
    });
    if (handed != storage.size) {
      core::raise<CheckpointError>("internal error: storage {} handed {} bytes, not its {}", i,
                                   handed, storage.size);
    }
    out.parts.push_back({out.length, storage.size, crc, static_cast<int>(i)});
    out.length += storage.size;
    head = zip.end(crc);
  }
  head += zip.entry(archive + "version", "3\n");
  head += zip.finish(comment_length);
  emit(head);
  return out;
}

StorageWriter storage_from_memory(const char* data, uint64_t size) {
  return {size, [data, size](const ByteSink& sink) {
            constexpr uint64_t kPiece = uint64_t{1} << 20;
            uint32_t crc = 0;
            for (uint64_t at = 0; at < size; at += kPiece) {
              const std::size_t n = static_cast<std::size_t>(std::min(kPiece, size - at));
              crc = util::crc32_update(crc, data + at, n);
              sink(data + at, n);
            }
            return crc;
          }};
}

}  // namespace rankwise::checkpoint::torch_save
