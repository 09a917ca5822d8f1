#pragma once
// libtorch's modules have no forward hooks (pytorch/pytorch#25888), but every
// operator call goes through the dispatcher, which runs RecordFunction
// observers with the call's inputs (the profiler's mechanism). One observer,
// registered while any sharded module lives, tells its owner when an
// operator is about to read the storage of a watched parameter (or of a view
// of it), so that the unit can be gathered first. docs/fsdp.md, "How units
// are found at run time".
#include <c10/core/StorageImpl.h>

namespace rankwise::parallel::fsdp {

class StorageWatcher {
 public:
  virtual ~StorageWatcher() = default;
  /// An operator is about to read a storage `watch` registered with `tag`.
  /// Runs on the operator's thread; must not throw (the dispatcher would
  /// only log it).
  virtual void touched(int tag) noexcept = 0;
};

/// Calls watcher->touched(tag) before each operator that reads `storage`.
void watch(const c10::StorageImpl* storage, StorageWatcher* watcher, int tag);
/// Stops every watch of `watcher` (before it is destroyed).
void unwatch_all(StorageWatcher* watcher);

/// While alive, operators on this thread are not observed (the engine's own
/// copies into and out of the watched storages).
class Unobserved {
 public:
  Unobserved();
  ~Unobserved();
  Unobserved(const Unobserved&) = delete;
  Unobserved& operator=(const Unobserved&) = delete;

 private:
  bool previous_;
};

/// Whether an operator call reaches the observer on this libtorch (checked once).
bool observer_works();

}  // namespace rankwise::parallel::fsdp
