#include "rankwise/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/detail/agreed_read.h"
#include "checkpoint/detail/atomic_file.h"
#include "checkpoint/detail/checkpoint_file.h"
#include "checkpoint/detail/file_lock.h"
#include "checkpoint/detail/leftovers.h"
#include "checkpoint/detail/rank_zero.h"
#include "detail/join.h"
#include "rankwise/error.h"

namespace rankwise {

Checkpoint::Checkpoint() : dict_(c10::StringType::get(), c10::AnyType::get()) {}

void Checkpoint::insert(const std::string& key, c10::IValue value) {
  dict_.insert_or_assign(key, std::move(value));
}

bool Checkpoint::contains(const std::string& key) const { return dict_.contains(key); }

std::vector<std::string> Checkpoint::keys() const {
  std::vector<std::string> result;
  for (const auto& entry : dict_) result.push_back(entry.key().toStringRef());
  return result;
}

const c10::IValue& Checkpoint::at(const std::string& key) const {
  auto it = dict_.find(key);
  if (it == dict_.end()) {
    throw CheckpointError("rankwise: checkpoint has no entry '" + key + "' (it has: " +
                          detail::join_list(keys()) + ")");
  }
  return it->value();
}

namespace {

// A checkpoint path naming a directory is refused before anything is written.
void check_not_a_directory(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    std::string inside = path;
    while (inside.size() > 1 && inside.back() == '/') inside.pop_back();
    throw CheckpointError("rankwise: the checkpoint path '" + path +
                          "' is a directory; give the path of a file in it, e.g. '" + inside +
                          "/checkpoint.pt' (sharded checkpoints, which are directories, are saved "
                          "with rankwise::save_sharded)");
  }
}

}  // namespace

void save(const std::string& path, const Checkpoint& state) {
  detail::on_rank_zero(
      [&] {
        check_not_a_directory(path);
        detail::FileLock lock(path + ".lock", "checkpoint '" + path + "'");
        detail::remove_leftovers_with_note(path, "save", false);
        detail::write_checkpoint_file(c10::IValue(state.dict()), path);
      },
      "the save by rank 0");
}

void check_checkpoint_path(const std::string& path) {
  check_not_a_directory(path);
  const std::string dir = detail::directory_of(path);
  if (::access(dir.c_str(), W_OK) != 0) {
    throw CheckpointError("rankwise: the checkpoint directory '" + dir +
                          "' does not exist or is not writable; create it or choose another "
                          "checkpoint path");
  }
}

namespace detail {

Checkpoint checkpoint_from(const c10::IValue& value, const std::string& path) {
  if (!value.isGenericDict()) {
    throw CheckpointError("rankwise: '" + path + "' holds a " + value.tagKind() +
                          ", not a dict; it is not a rankwise checkpoint");
  }
  Checkpoint result;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      throw CheckpointError("rankwise: '" + path + "' has a non-string key");
    }
    result.insert(entry.key().toStringRef(), entry.value());
  }
  return result;
}

}  // namespace detail

Checkpoint load(const std::string& path) {
  return detail::checkpoint_from(detail::read_checkpoint_file(path), path);
}

Checkpoint load_collective(const std::string& path, CollectiveLoadOptions options) {
  auto file = detail::read_agreed([&]() -> std::optional<std::string> { return path; }, options);
  return detail::checkpoint_from(file->value, path);
}

bool verify(const std::string& path) {
  return detail::verify_checkpoint_file(path) == detail::Integrity::kVerified;
}

}  // namespace rankwise
