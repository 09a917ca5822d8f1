#include "checkpoint/sharded/storage_claim.h"

#include "core/check.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "checkpoint/io/atomic_file.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::sharded {

void write_storage_marker(const std::string& tmp, int rank) {
  const std::string text = std::to_string(rank) + "\n";
  io::write_file_atomically(tmp + "/" + kStorageMarker, text.data(), text.size());
}

bool claim_directory(const std::string& tmp, int rank) {
  if (::mkdir(tmp.c_str(), 0755) == 0) {
    write_storage_marker(tmp, rank);
    return true;
  }
  if (errno == EEXIST) return false;
  core::raise<CheckpointError>(
      "save_sharded: rank {} cannot create the temporary directory '{}' on its node: {}. Check "
      "that the checkpoint's parent directory exists on every node, is writable and has free space",
      rank, tmp, std::strerror(errno));
}

int read_storage_marker(const std::string& tmp, std::chrono::milliseconds bound) {
  const std::string path = tmp + "/" + kStorageMarker;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    std::ifstream in(path);
    int rank = -1;
    if (in && (in >> rank) && rank >= 0) return rank;
    if (std::chrono::steady_clock::now() >= deadline) {
      core::raise<CheckpointError>(
          "save_sharded: '{}' is missing or empty after {} ms: this rank's view of the temporary "
          "directory is not the one its creator wrote (a network filesystem's stale cache?)",
          path, bound.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace rankwise::checkpoint::sharded
