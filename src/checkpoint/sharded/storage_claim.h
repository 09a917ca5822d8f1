#pragma once
// Which ranks of a sharded save write into the same temporary directory:
// each rank tries to create the directory rank 0 created. mkdir(2) is
// decided by the filesystem that holds the parent (on NFS, by the server,
// never from a client's cache), so EEXIST means "this rank sees the same
// storage as a rank that created it" and success means "a disk no earlier
// creator is on" (a node's own disk). The creator writes its rank into a
// marker file there; every rank then reads the marker: the rank that created
// its directory is the leader of its storage node.
#include <chrono>
#include <string>

namespace rankwise::checkpoint::sharded {

/// The marker in a sharded save's temporary directory (removed before publication).
constexpr const char* kStorageMarker = ".rankwise-storage";

/// Creates `tmp` (mode 0755) unless it exists; when this rank created it,
/// writes its rank into the marker. Returns true when it created it. Throws
/// CheckpointError naming `tmp` and errno for any other failure (the
/// parent missing on this node's disk, no permission, no space).
bool claim_directory(const std::string& tmp, int rank);

/// Writes `rank` into the marker of `tmp` (for rank 0, which made `tmp` by mkdtemp).
void write_storage_marker(const std::string& tmp, int rank);

/// The rank in the marker of `tmp`, reread every 100 ms up to `bound` while
/// it is missing or empty (a network filesystem's stale view). Throws
/// CheckpointError naming the path when it is still missing then.
int read_storage_marker(const std::string& tmp, std::chrono::milliseconds bound);

}  // namespace rankwise::checkpoint::sharded
