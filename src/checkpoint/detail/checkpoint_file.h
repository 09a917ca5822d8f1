#pragma once
/// The checkpoint file format: torch.save's zip format (what Python's
/// torch.load reads), written by PyTorch's own PyTorchStreamWriter, plus a
/// CRC-32 (zlib) of the whole file recorded in the zip's archive comment
/// (APPNOTE.TXT 4.3.16: the end-of-central-directory record may carry a
/// comment, which zip readers, torch.load included, skip).
///
/// Layout: [zip records ... central directory][EOCD, comment length = 34]
///         ["rankwise-checkpoint crc32=xxxxxxxx"]
/// The CRC covers every byte before the comment.
#include <ATen/core/ivalue.h>

#include <string>

namespace rankwise::detail {

class AtomicFile;

/// Serializes `value` into `file` (not committed). Throws CheckpointError.
void write_checkpoint_file(const c10::IValue& value, AtomicFile& file);

/// What verify_checkpoint_file found.
enum class Integrity { kVerified, kNoChecksum };

/// Checks the recorded CRC-32 without unpickling. kNoChecksum for files
/// written without one (Python's torch.save). Throws CheckpointError naming
/// the path when the file is missing, truncated, torn or altered.
Integrity verify_checkpoint_file(const std::string& path);

/// Verifies (as above), then unpickles onto the CPU. Throws CheckpointError.
c10::IValue read_checkpoint_file(const std::string& path, Integrity* integrity = nullptr);

}  // namespace rankwise::detail
