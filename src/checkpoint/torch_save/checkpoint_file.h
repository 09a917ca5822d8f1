#pragma once
/// The checkpoint file format: torch.save's zip format (what Python's
/// torch.load reads), written front to back by write_torch_save_archive
/// (torch_save_archive.h: every byte checksummed once, the whole-file CRC
/// combined from the entries'; files of rankwise before 2026-12-04, written
/// by PyTorch's PyTorchStreamWriter, have the same trailer), plus a
/// CRC-32 (zlib) of the whole file recorded in the zip's archive comment
/// (APPNOTE.TXT 4.3.16: the end-of-central-directory record may carry a
/// comment, which zip readers, torch.load included, skip).
///
/// Layout: [zip records ... central directory][EOCD, comment length = 34]
///         ["rankwise-checkpoint crc32=xxxxxxxx"]
/// The CRC covers every byte before the comment.
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

#include "rankwise/checkpoint/checkpoint.h"

namespace rankwise::checkpoint::torch_save {

/// Serializes `value` to `path` atomically and durably (an AtomicFile:
/// temporary file, fsync, rename, directory fsync). Throws CheckpointError;
/// on failure `path` is untouched.
void write_checkpoint_file(const c10::IValue& value, const std::string& path);

/// What verify_checkpoint_file found.
enum class Integrity { kVerified, kNoChecksum };

/// Checks the recorded CRC-32 without unpickling. kNoChecksum for files
/// written without one (Python's torch.save). Throws CheckpointError naming
/// the path when the file is missing, truncated, torn or altered.
Integrity verify_checkpoint_file(const std::string& path);

/// Verifies (as above), then unpickles onto the CPU. Throws CheckpointError.
c10::IValue read_checkpoint_file(const std::string& path, Integrity* integrity = nullptr);

/// read_checkpoint_file() of a file's bytes held in memory (received from
/// another rank); `path` names it in messages.
c10::IValue read_checkpoint_bytes(const std::string& bytes, const std::string& path,
                                  Integrity* integrity = nullptr);

/// What tells one version of a checkpoint file from another without reading
/// it whole: its size and the CRC-32 its trailer records (`recorded`), or,
/// for a file without one (Python's torch.save), the CRC-32 of all its bytes.
struct FileIdentity {
  uint64_t size = 0;
  uint32_t crc = 0;
  bool recorded = false;
  bool operator==(const FileIdentity& other) const {
    return size == other.size && crc == other.crc && recorded == other.recorded;
  }
};

/// The identity of the file at `path` as this process sees it. Throws
/// CheckpointError as verify_checkpoint_file() does for a missing, truncated
/// or torn file (it does not check the recorded CRC against the content).
FileIdentity identify_checkpoint_file(const std::string& path);

/// Bytes of the checksum record (the zip comment) at the end of a file that
/// has one; 0 when the file at `path` does not end with one (Python's
/// torch.save, or not a checkpoint) or cannot be read.
int64_t checksum_record_size(const std::string& path);

/// Every byte of the file at `path`. Throws CheckpointError.
std::string read_file_bytes(const std::string& path);

/// The Checkpoint held by `value` read from `path`: a dict with string keys,
/// else CheckpointError naming the file.
Checkpoint checkpoint_from(const c10::IValue& value, const std::string& path);

}  // namespace rankwise::checkpoint::torch_save
