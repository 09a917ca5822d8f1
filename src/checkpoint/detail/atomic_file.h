#pragma once
#include <string>

namespace rankwise::detail {

/// Writes `size` bytes to `path` atomically and durably: a temporary file in
/// the same directory, fsync, rename, fsync of the directory. On failure the
/// temporary file is removed, `path` is untouched, and CheckpointError says
/// which step failed and why (errno text).
void write_file_atomically(const std::string& path, const char* data, std::size_t size);

/// The directory part of `path` ("." when it has none).
std::string directory_of(const std::string& path);

/// Reads a whole file. Throws CheckpointError naming the path when it fails.
std::string read_file(const std::string& path);

}  // namespace rankwise::detail
