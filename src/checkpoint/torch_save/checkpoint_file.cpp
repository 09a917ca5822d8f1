#include "checkpoint/torch_save/checkpoint_file.h"

#include "core/check.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "checkpoint/io/atomic_file.h"
#include "util/io.h"
#include "checkpoint/pickle/python_pickle.h"
#include "checkpoint/io/read_checksums.h"
#include "checkpoint/pickle/saveable_value.h"
#include "checkpoint/pickle/torch_save_pickle.h"
#include "checkpoint/torch_save/archive.h"
#include "checkpoint/torch_save/byte_source.h"
#include "checkpoint/pickle/unpickled_value.h"
#include "util/crc32.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::torch_save {
namespace {

constexpr std::size_t kEocdSize = 22;  // end of central directory record, without comment
constexpr uint32_t kEocdSignature = 0x06054b50;
constexpr char kMarker[] = "rankwise-checkpoint crc32=";
constexpr std::size_t kMarkerSize = sizeof(kMarker) - 1;
constexpr std::size_t kTrailerSize = kMarkerSize + 8;  // + 8 hex digits

uint32_t read_le32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Opens `path` (a regular file of at least one zip end record); `file` owns the descriptor.
uint64_t open_checkpoint(const std::string& path, Fd& file) {
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) {
    core::raise<CheckpointError>("cannot open checkpoint '{}': {}. Check the path", path,
                                 std::strerror(errno));
  }
  // Whether `dir` holds a sharded checkpoint's .metadata.
  const auto sharded_dir = [](const std::string& dir) { return ::access((dir + "/.metadata").c_str(), F_OK) == 0; };
  struct stat info {};
  if (::fstat(file.fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    const bool sharded = sharded_dir(path);
    core::raise<CheckpointError>(
        "checkpoint '{}' is a directory{}", path,
        (sharded ? ": a sharded checkpoint; read it with rankwise::checkpoint::load_sharded "
                   "(read_sharded_metadata lists what it holds)"
                 : ", not a checkpoint file; give the path of a file"));
  }
  if (::fstat(file.fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    core::raise<CheckpointError>("checkpoint '{}' is not a regular file", path);
  }
  // One file of a sharded checkpoint (DCP's __<rank>_<n>.distcp): a series of
  // torch.save archives, the last of which would otherwise be read alone.
  const std::filesystem::path file_path(path);
  if (file_path.extension() == ".distcp" || file_path.filename() == ".metadata" ||
      file_path.filename() == ".rankwise-manifest.json") {
    const std::filesystem::path dir = file_path.parent_path();
    const bool in_checkpoint = sharded_dir(dir.empty() ? "." : dir.string());
    core::raise<CheckpointError>(
        "'{}' is {}, not a checkpoint file of its own; read the whole directory with "
        "rankwise::checkpoint::load_sharded (read_sharded_metadata lists what it holds)",
        path,
        (in_checkpoint ? "a file of the sharded checkpoint '" + dir.string() + "'"
                       : std::string("a file of a sharded checkpoint (DCP's layout)")));
  }
  return static_cast<uint64_t>(info.st_size);
}

[[noreturn]] void unreadable(const ByteSource& source, const std::string& why);

// What the end of a checkpoint says: the CRC-32 recorded in rankwise's
// trailer, or none (torch.save's files). Throws CheckpointError for a file
// that is truncated, torn or not a zip.
struct Trailer {
  Integrity integrity = Integrity::kNoChecksum;
  uint32_t recorded = 0;
};

Trailer read_trailer(const ByteSource& source) {
  const std::string& path = source.path();
  const uint64_t size = source.size();
  if (size < kEocdSize) {
    core::raise<CheckpointError>(
        "checkpoint '{}' is truncated or not a checkpoint ({} bytes; a zip checkpoint has at least "
        "{})",
        path, size, kEocdSize);
  }
  const std::size_t tail_size = static_cast<std::size_t>(std::min<uint64_t>(size, kEocdSize + kTrailerSize));
  std::vector<unsigned char> tail(tail_size);
  source.read(tail.data(), tail_size, size - tail_size);
  const std::string tail_text(tail.begin(), tail.end());
  // The whole marker, "crc32=" included: a torch.save file whose archive
  // (named after the file's stem by torch 1.x) is "..rankwise-checkpoint"
  // has that text in its last central directory entry.
  const bool has_marker = tail_text.find(kMarker) != std::string::npos;
  const bool has_eocd_with_trailer = tail_size == kEocdSize + kTrailerSize &&
                                     read_le32(tail.data()) == kEocdSignature &&
                                     tail[20] == (kTrailerSize & 0xff) && tail[21] == (kTrailerSize >> 8);
  // An end record announcing our comment with the comment cut off: truncated.
  const unsigned char* last_eocd = tail.data() + tail_size - kEocdSize;
  const bool trailer_cut_off = read_le32(last_eocd) == kEocdSignature &&
                               last_eocd[20] == (kTrailerSize & 0xff) &&
                               last_eocd[21] == (kTrailerSize >> 8);
  if (trailer_cut_off) {
    core::raise<CheckpointError>(
        "checkpoint '{}' is truncated: its checksum record is missing; do not use it: load the "
        "previous checkpoint",
        path);
  }
  if (!has_marker && !has_eocd_with_trailer) {
    // No checksum: torch.save's files (no zip comment) end with the zip's end
    // record; anything else is cut short or not a zip at all.
    if (read_le32(last_eocd) != kEocdSignature) {
      unreadable(source, "it does not end with a zip end-of-central-directory record");
    }
    return {};
  }
  const std::string trailer = tail_text.substr(tail_size >= kTrailerSize ? tail_size - kTrailerSize : 0);
  unsigned recorded = 0;
  char extra = 0;
  if (!has_eocd_with_trailer || trailer.compare(0, kMarkerSize, kMarker) != 0 ||
      std::sscanf(trailer.c_str() + kMarkerSize, "%8x%c", &recorded, &extra) != 1 ||
      trailer.find_first_not_of("0123456789abcdef", kMarkerSize) != std::string::npos) {
    core::raise<CheckpointError>(
        "checkpoint '{}' has a damaged checksum record at its end (torn or altered file); do not "
        "use it: load the previous checkpoint",
        path);
  }
  return {Integrity::kVerified, recorded};
}

// Checks the trailer and the CRC; returns the integrity found.
// Throws CheckpointError unless the bytes before the trailer have the CRC-32 it records.
void check_crc(const ByteSource& source, const Trailer& trailer, uint32_t actual) {
  if (actual != trailer.recorded) {
    core::raise<CheckpointError>(
        "checkpoint '{}' is corrupt: recorded CRC-32 {:08x}, content has {:08x} (the file was "
        "altered or torn after it was written); do not use it: load the previous checkpoint",
        source.path(), trailer.recorded, actual);
  }
}

// Throws CheckpointError (unreadable) unless `source` is a zip with
// torch.save's data.pkl record; reads its central directory only.
void check_torch_save_zip(const ByteSource& source);

Integrity verify_source(const ByteSource& source) {
  const Trailer trailer = read_trailer(source);
  if (trailer.integrity == Integrity::kVerified) {
    check_crc(source, trailer, source.crc_of_prefix(source.size() - kTrailerSize));
  } else {
    check_torch_save_zip(source);  // false is for torch.save's files only, not any zip
  }
  return trailer.integrity;
}

// A ByteSource as PyTorchStreamReader reads it; through `sums` when given.
class SourceReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  SourceReadAdapter(const ByteSource& source, io::ReadChecksums* sums) : source_(source), sums_(sums) {}
  size_t size() const override { return static_cast<size_t>(source_.size()); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= source_.size()) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, source_.size() - pos));
    if (sums_ != nullptr) {
      sums_->read(buf, n, pos);
    } else {
      source_.read(buf, n, pos);
    }
    return n;
  }

 private:
  const ByteSource& source_;
  io::ReadChecksums* sums_;
};

[[noreturn]] void unreadable(const ByteSource& source, const std::string& why) {
  unsigned char first = 0;
  if (source.size() > 0) source.read(&first, 1, 0);
  const std::string& path = source.path();
  if (first == 0x80) {  // a pickle, not a zip: torch.save's legacy (pre-1.6) format
    core::raise<CheckpointError>(
        "'{}' is in torch.save's legacy format (_use_new_zipfile_serialization=False), which "
        "libtorch cannot read; in Python, load it and save it again with torch.save(obj, path)",
        path);
  }
  // c10's internal prefix ("[enforce fail at inline_container.cc:129] ") says nothing to a user.
  std::string reason = why;
  if (reason.rfind("[enforce fail at ", 0) == 0 && reason.find("] ") != std::string::npos) {
    reason.erase(0, reason.find("] ") + 2);
  }
  core::raise<CheckpointError>(
      "'{}' is not a readable checkpoint (truncated, or not written by torch.save / "
      "rankwise::checkpoint::save): {}. If it is one of your checkpoints, it is damaged and cannot "
      "be repaired: load the previous one (CheckpointManager::load_latest falls back to it by "
      "itself)",
      path, reason);
}

void check_torch_save_zip(const ByteSource& source) {
  bool has_pickle = false;
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<SourceReadAdapter>(source, nullptr));
    has_pickle = reader.hasRecord("data.pkl");
  } catch (const c10::Error& e) {
    unreadable(source, e.what_without_backtrace());
  } catch (const std::exception& e) {
    unreadable(source, e.what());
  }
  if (!has_pickle) unreadable(source, "it is a zip without torch.save's data.pkl record");
}

// Unpickles onto the CPU: `found` tells rankwise's pickles (checked) from
// Python's (adapted, then checked); every read goes through `sums` when given.
c10::IValue parse_source(const ByteSource& source, Integrity found, io::ReadChecksums* sums);

// The CRC-32 is assembled from the parser's own reads (read_checksums.h: no
// second pass over the file, and the bytes verified are the bytes returned).
// Parsing unverified bytes is safe (the pickle is checked opcode by opcode
// and every tensor against its record either way); nothing is returned
// before the CRC has passed, and its verdict comes first: when the parse
// fails, the file's CRC is checked on its own, so that a damaged file is
// reported as damaged, whatever the parser made of it.
c10::IValue read_source(const ByteSource& source, Integrity* integrity) {
  const Trailer trailer = read_trailer(source);
  if (integrity) *integrity = trailer.integrity;
  if (trailer.integrity != Integrity::kVerified) return parse_source(source, trailer.integrity, nullptr);
  const uint64_t end = source.size() - kTrailerSize;
  io::ReadChecksums sums([&](void* buffer, std::size_t n, uint64_t offset) { source.read(buffer, n, offset); },
                     end);
  c10::IValue value;
  try {
    value = parse_source(source, trailer.integrity, &sums);
  } catch (...) {
    check_crc(source, trailer, source.crc_of_prefix(end));
    throw;
  }
  const io::ReadChecksums::Assembled read = sums.crc();
  if (!read.consistent) {
    core::raise<CheckpointError>(
        "checkpoint '{}' changed while it was being read (two reads of the same bytes differ); "
        "something is writing into it in place: load it again once the writer is done",
        source.path());
  }
  check_crc(source, trailer, read.crc);
  return value;
}

c10::IValue parse_source(const ByteSource& source, Integrity found, io::ReadChecksums* sums) {
  const std::string& path = source.path();
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<SourceReadAdapter>(source, sums));
    // As torch::jit::readArchiveAndTensors("data", ...), with pickles from
    // Python's torch.save (no checksum) adapted to libtorch's Unpickler.
    at::DataPtr pickle;
    std::size_t pickle_size = 0;
    std::tie(pickle, pickle_size) = reader.getRecord("data.pkl");
    const auto* pickle_bytes = static_cast<const char*>(pickle.get());
    std::string rewritten;
    const bool from_python = found == Integrity::kNoChecksum;
    if (from_python) {
      rewritten = pickle::adapt_python_pickle(pickle_bytes, pickle_size, path);
      pickle_bytes = rewritten.data();
      pickle_size = rewritten.size();
    } else {
      pickle::check_pickle(pickle_bytes, pickle_size, path);  // a valid checksum proves integrity, not intent
    }
    std::size_t consumed = 0;
    auto read_pickle = [&](char* buffer, std::size_t n) -> std::size_t {
      n = std::min(n, pickle_size - consumed);
      std::memcpy(buffer, pickle_bytes + consumed, n);
      consumed += n;
      return n;
    };
    pickle::RecordSizes records;
    auto read_record = [&](const std::string& name) {
      auto [data, size] = reader.getRecord("data/" + name);
      records[data.get()] = size;
      return std::move(data);
    };
    torch::jit::Unpickler unpickler(read_pickle, nullptr, nullptr, read_record,
                                    at::Device(at::kCPU));
    unpickler.set_version(reader.version());
    c10::IValue value;
    try {
      value = unpickler.parse_ivalue();
    } catch (const c10::Error& e) {
      if (!from_python) throw;
      // A file of Python's (no checksum) whose zip reads: a value libtorch does not know, most likely.
      core::raise<CheckpointError>(
          "'{}' holds a value libtorch's unpickler cannot read ({}). If Python's torch.save wrote "
          "it, convert that value to tensors, dicts, lists, tuples, strings or numbers before "
          "saving; otherwise the file is damaged: do not use it",
          path, e.what_without_backtrace());
    }
    pickle::check_tensor_bounds(value, records, path);
    if (from_python) pickle::strip_pickle_state(value);
    return value;
  } catch (const CheckpointError&) {
    throw;
  } catch (const c10::Error& e) {
    unreadable(source, e.what_without_backtrace());
  } catch (const std::exception& e) {
    unreadable(source, e.what());
  }
}

}  // namespace

void write_checkpoint_file(const c10::IValue& value, const std::string& path) {
  pickle::check_saveable(value);
  pickle::TorchSavePickle pickled;
  std::vector<torch::jit::WriteableTensorData> tensors;  // each storage's bytes (a CUDA one copied to the CPU)
  try {
    pickled = pickle::torch_save_pickle(value);
    for (const at::Tensor& t : pickled.storages) tensors.push_back(torch::jit::getWriteableTensorData(t));
  } catch (const c10::Error& e) {
    core::raise<CheckpointError>("serializing the checkpoint failed: {}",
                                 e.what_without_backtrace());
  }
  std::vector<StorageWriter> storages;
  for (const auto& t : tensors) storages.push_back(storage_from_memory(t.data(), t.sizeInBytes()));
  io::AtomicFile file(path);
  const WrittenArchive archive = write_torch_save_archive(
      pickled.bytes, storages, [&](const char* data, std::size_t size) { file.write(data, size); }, kTrailerSize);
  char trailer[kTrailerSize + 1];
  std::snprintf(trailer, sizeof(trailer), "%s%08x", kMarker, static_cast<unsigned>(archive.crc32()));
  file.write(trailer, kTrailerSize);
  file.commit();
}

Integrity verify_checkpoint_file(const std::string& path) {
  Fd file;
  const uint64_t size = open_checkpoint(path, file);
  return verify_source(FileSource(path, file.fd, size));
}

c10::IValue read_checkpoint_file(const std::string& path, Integrity* integrity) {
  Fd file;
  const uint64_t size = open_checkpoint(path, file);
  return read_source(FileSource(path, file.fd, size), integrity);
}

c10::IValue read_checkpoint_bytes(const std::string& bytes, const std::string& path,
                                  Integrity* integrity) {
  return read_source(MemorySource(path, bytes), integrity);
}

int64_t checksum_record_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<int64_t>(in.tellg());
  if (!in || size < static_cast<int64_t>(kTrailerSize)) return 0;
  std::string tail(kTrailerSize, '\0');
  in.seekg(size - static_cast<int64_t>(kTrailerSize));
  in.read(tail.data(), static_cast<std::streamsize>(kTrailerSize));
  return in && tail.rfind(kMarker, 0) == 0 ? static_cast<int64_t>(kTrailerSize) : 0;
}

FileIdentity identify_checkpoint_file(const std::string& path) {
  Fd file;
  const uint64_t size = open_checkpoint(path, file);
  const FileSource source(path, file.fd, size);
  const Trailer trailer = read_trailer(source);
  if (trailer.integrity == Integrity::kVerified) return {size, trailer.recorded, true};
  return {size, source.crc_of_prefix(size), false};
}

std::string read_file_bytes(const std::string& path) {
  Fd file;
  const uint64_t size = open_checkpoint(path, file);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  read_exactly(file.fd, bytes.data(), bytes.size(), 0, path);
  return bytes;
}

}  // namespace rankwise::checkpoint::torch_save
