#include "checkpoint/sharded/complete.h"

#include "core/check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/sharded/manifest.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::sharded {

void check_sharded_complete(const std::string& dir) {
  const auto fail = [&](const std::string& why) {
    core::raise<CheckpointError>("sharded checkpoint '{}' is incomplete: {}", dir, why);
  };
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) fail("it is not a directory");
  const std::string metadata = dir + "/" + kMetadataName;
  const std::string manifest_path = dir + "/" + kManifestName;
  if (::access(metadata.c_str(), F_OK) != 0) fail(fmt::format("it has no {}", kMetadataName));
  if (::access(manifest_path.c_str(), F_OK) != 0) fail(fmt::format("it has no {}", kManifestName));
  const std::string bytes = io::read_file(metadata);
  const Manifest manifest = manifest_from_json(io::read_file(manifest_path), manifest_path);
  if (crc32_of(bytes.data(), bytes.size()) != manifest.metadata_crc32) {
    fail("its .metadata does not match the CRC-32 its manifest records");
  }
  std::map<std::string, int64_t> needed;  // data file -> bytes its chunks reach
  for (const auto& c : manifest.chunks) needed[c.file] = std::max(needed[c.file], c.offset + c.length);
  // Saved to node-local disks, this disk holds its own storage node's files only: every node that
  // has any file here must have all of them, and some node must be here.
  if (manifest.nodes.size() > 1) {
    std::map<std::string, int64_t> here;
    for (const auto& node : manifest.nodes) {
      const bool present = std::any_of(node.files.begin(), node.files.end(), [&](const std::string& f) {
        return f.find('/') == std::string::npos && ::access((dir + "/" + f).c_str(), F_OK) == 0;
      });
      if (!present) continue;
      for (const auto& f : node.files) here[f] = needed.count(f) ? needed[f] : 0;
    }
    if (here.empty()) fail("none of its storage nodes' data files is on this disk");
    needed = std::move(here);
  }
  for (const auto& [file, end] : needed) {
    if (file.find('/') != std::string::npos || file == "." || file == "..") {
      fail(fmt::format("its manifest names the data file '{}', which is not a file name inside the directory", file));
    }
    if (::stat((dir + "/" + file).c_str(), &info) != 0) {
      fail(fmt::format("data file '{}': {}", file, std::strerror(errno)));
    }
    if (static_cast<int64_t>(info.st_size) < end) {
      fail(fmt::format("data file '{}' has {} bytes, its chunks reach byte {} (truncated)", file, info.st_size, end));
    }
  }
}

}  // namespace rankwise::checkpoint::sharded
