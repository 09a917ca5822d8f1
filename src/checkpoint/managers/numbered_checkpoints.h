#pragma once
// The numbered checkpoints of a directory and its `latest` pointer, for
// ManagerBase (manager_base.h), shared by CheckpointManager (files
// "<prefix>-<step>.pt") and ShardedCheckpointManager (directories
// "<prefix>-<step>"): naming, listing, the atomic pointer, and the choice of
// the newest usable one.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rankwise::checkpoint::managers {

/// The entries "<prefix>-<10-digit step><suffix>" of `directory`.
class NumberedCheckpoints {
 public:
  NumberedCheckpoints(std::string directory, std::string prefix, std::string suffix);

  /// `directory/<prefix>-<step, 10 digits><suffix>`.
  std::string path_for(int64_t step) const;
  /// The step a name (no directory) stands for, or -1 when it is not one of ours.
  int64_t step_of(const std::string& name) const;
  /// Paths of the numbered entries, oldest (lowest step) first.
  std::vector<std::string> list() const;
  /// Replaces `directory/latest` atomically and durably (AtomicFile) with the
  /// name of `path`.
  void point_latest_to(const std::string& path) const;
  /// Removes the `latest` pointer (when present).
  void remove_latest() const;
  /// The first candidate, newest first (the entry `latest` names, then the
  /// numbered ones from the highest), for which `use` does not throw
  /// CheckpointError; skipped ones are noted on stderr (io::note), and a
  /// fallback past an unusable pointer says so. nullopt when there is no
  /// pointer and no entry; CheckpointError when there are some but none is usable.
  std::optional<std::string> newest_usable(const std::function<void(const std::string&)>& use) const;

  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  std::string prefix_;
  std::string suffix_;
};

/// The text of a CheckpointError without its "rankwise: " prefix.
std::string reason_of(const std::exception& e);

}  // namespace rankwise::checkpoint::managers
