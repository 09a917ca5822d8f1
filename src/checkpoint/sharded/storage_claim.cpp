#include "checkpoint/sharded/storage_claim.h"

#include "core/check.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "rankwise/error.h"
#include "util/io.h"

namespace rankwise::checkpoint::sharded {

// Written whole under another name, then renamed, so that a reader never sees part of it. Not
// fsynced: it lives only while the save runs (after a crash the whole directory is a leftover),
// and this runs on the training thread.
void write_storage_marker(const std::string& tmp, int rank) {
  const std::string path = tmp + "/" + kStorageMarker;
  if (!util::write_then_rename(path, std::to_string(rank) + "\n")) {
    core::raise<CheckpointError>("save_sharded: cannot write '{}': {}. Check that it is writable and has free space",
                                 path, std::strerror(errno));
  }
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
