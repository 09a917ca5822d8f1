#pragma once
// A sharded save in its three phases, which save_sharded() runs back to back
// and ShardedCheckpointManager::save_async() splits over two calls:
//
//   begin    (collective) rank 0 creates the temporary directory, every rank
//            claims its storage node (steps 1-2 of docs/checkpoint-format.md);
//   write    (local, no communication) this rank's data file, checksummed and
//            fsynced; a failure goes into the report instead of being thrown,
//            so that it can run on a thread of its own (step 3);
//   publish  (collective) every rank's report to every rank (agree), then
//            .metadata, the manifest and the rename on each storage node's
//            leader (steps 3-7): throws CheckpointError on every rank when
//            any rank failed. With one storage node, everything after the
//            agreement is its leader's alone (publish_alone, any thread).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rankwise/checkpoint/sharded_checkpoint.h"

namespace rankwise::checkpoint::sharded {

/// Whether the save takes `dir`.lock on rank 0: a plain save_sharded does;
/// ShardedCheckpointManager already holds its directory's lock.
enum class SaveLock { kTake, kHeldByCaller };

/// Objects' torch.save records by key (object_record_bytes), pickled ahead
/// of write(): libtorch's pickler memoizes a container only while something
/// else holds it too, so pickling the caller's value at the call gives the
/// bytes a synchronous save would, and a copy pickled later might not.
using PickledObjects = std::map<std::string, std::vector<char>>;

class ShardedSave {
 public:
  /// Begins a save into `dir`: the temporary directory exists on every
  /// storage node when it returns. Collective: every rank, same order.
  /// Throws CheckpointError on every rank (rank 0's error, or a claim that
  /// failed; nothing is left behind).
  ShardedSave(const std::string& dir, SaveLock lock);
  /// Removes this rank's view of the temporary directory unless published.
  ~ShardedSave();
  ShardedSave(const ShardedSave&) = delete;
  ShardedSave& operator=(const ShardedSave&) = delete;

  /// Writes this rank's data file from `state` and keeps its report. Local:
  /// no communication, any thread; never throws (a failure, with this rank
  /// named, is reported by publish() on every rank). Once per save. The
  /// objects in `pickled` are written from those bytes (their values in
  /// `state` only show in errors); the others are pickled here.
  void write(const ShardedState& state, const PickledObjects& pickled = {}) noexcept;
  /// Records a failure that happened before write() could run (the
  /// asynchronous save's snapshot), as write() records its own.
  void fail(const std::string& why) noexcept;

  /// Gathers every rank's report: collective (every rank, same order, after
  /// write() or fail()). Throws CheckpointError on every rank, naming the
  /// ranks that failed (nothing is published). Returns how many storage
  /// nodes the save has.
  std::size_t agree();
  /// After agree(): writes .metadata and the manifest on every storage node,
  /// then renames each node's directory into place. Collective. Returns
  /// whether this rank leads a storage node (it renamed that node's
  /// directory, so it moves that node's `latest`). Throws CheckpointError on
  /// every rank when any node could not.
  bool publish_agreed();
  /// After agree(), on the leader of the save's only storage node: what
  /// publish_agreed() does, with nobody to agree with. Local: no
  /// communication, any thread. Throws CheckpointError (the temporary
  /// directory removed, the previous checkpoint in place).
  void publish_alone();
  /// agree(), then publish_agreed().
  bool publish();

  /// Whether this rank leads its storage node (rank 0 does).
  bool leads() const;
  /// The directory being saved (without a trailing slash).
  const std::string& dir() const;

 private:
  struct Run;
  std::unique_ptr<Run> run_;
};

/// save_sharded(dir, state) as the three phases; returns publish()'s result.
bool save_sharded_leading(const std::string& dir, const ShardedState& state, SaveLock lock);

}  // namespace rankwise::checkpoint::sharded
