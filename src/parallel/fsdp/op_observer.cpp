#include "parallel/fsdp/op_observer.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

namespace rankwise::parallel::fsdp {
namespace {

thread_local bool t_unobserved = false;

struct Registry {
  std::shared_mutex mutex;
  std::unordered_map<const c10::StorageImpl*, std::pair<StorageWatcher*, int>> watched;
  std::optional<at::CallbackHandle> handle;
};

Registry& registry() {
  static Registry* r = new Registry();  // outlives every static destructor
  return *r;
}

void check(const at::Tensor& t) {
  if (!t.defined() || !t.unsafeGetTensorImpl()->has_storage()) return;
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  std::pair<StorageWatcher*, int> hit{nullptr, 0};
  {
    std::shared_lock lock(registry().mutex);
    const auto it = registry().watched.find(storage);
    if (it == registry().watched.end()) return;
    hit = it->second;
  }
  hit.first->touched(hit.second);
}

std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
  if (t_unobserved) return nullptr;
  for (const c10::IValue& input : fn.inputs()) {
    if (input.isTensor()) {
      check(input.toTensor());
    } else if (input.isTensorList()) {
      for (const at::Tensor& t : input.toTensorList().vec()) check(t);
    } else if (input.isList()) {
      for (const c10::IValue& e : input.toListRef()) {
        if (e.isTensor()) check(e.toTensor());
      }
    }
  }
  return nullptr;
}

}  // namespace

void watch(const c10::StorageImpl* storage, StorageWatcher* watcher, int tag) {
  std::unique_lock lock(registry().mutex);
  registry().watched[storage] = {watcher, tag};
  if (!registry().handle) {
    registry().handle = at::addGlobalCallback(at::RecordFunctionCallback(on_operator)
                                                  .needsInputs(true)
                                                  .scopes({at::RecordScope::FUNCTION}));
  }
}

void unwatch_all(StorageWatcher* watcher) {
  std::unique_lock lock(registry().mutex);
  auto& watched = registry().watched;
  for (auto it = watched.begin(); it != watched.end();) {
    it = it->second.first == watcher ? watched.erase(it) : std::next(it);
  }
  if (watched.empty() && registry().handle) {
    at::removeCallback(*registry().handle);
    registry().handle.reset();
  }
}

Unobserved::Unobserved() : previous_(t_unobserved) { t_unobserved = true; }
Unobserved::~Unobserved() { t_unobserved = previous_; }

bool observer_works() {
  static const bool works = [] {
    struct Probe : StorageWatcher {
      bool seen = false;
      void touched(int) noexcept override { seen = true; }
    } probe;
    const at::Tensor t = at::ones({2});
    watch(t.storage().unsafeGetStorageImpl(), &probe, 0);
    (void)at::add(t, 1);
    unwatch_all(&probe);
    return probe.seen;
  }();
  return works;
}

}  // namespace rankwise::parallel::fsdp
