#include "rankwise/checkpoint/checkpoint.h"

#include "core/check.h"

#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/ranks/agreed_read.h"
#include "checkpoint/io/atomic_file.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "checkpoint/io/file_lock.h"
#include "checkpoint/io/leftovers.h"
#include "checkpoint/ranks/rank_zero.h"
#include "util/text.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint {

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
    core::raise<CheckpointError>("checkpoint has no entry '{}' (it has: {})", key,
                                 util::join_strings(keys()));
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
    core::raise<CheckpointError>(
        "the checkpoint path '{}' is a directory; give the path of a file in it, e.g. "
        "'{}/checkpoint.pt' (sharded checkpoints, which are directories, are saved with "
        "rankwise::checkpoint::save_sharded)",
        path, inside);
  }
}

}  // namespace

void save(const std::string& path, const Checkpoint& state) {
  ranks::on_rank_zero(
      [&] {
        check_not_a_directory(path);
        io::FileLock lock(path + ".lock", "checkpoint '" + path + "'");
        io::remove_leftovers_with_note(path, "save", false);
        torch_save::write_checkpoint_file(c10::IValue(state.dict()), path);
      },
      "the save by rank 0");
}

void check_checkpoint_path(const std::string& path) {
  check_not_a_directory(path);
  const std::string dir = io::directory_of(path);
  if (::access(dir.c_str(), W_OK) != 0) {
    core::raise<CheckpointError>(
        "the checkpoint directory '{}' does not exist or is not writable; create it or choose "
        "another checkpoint path",
        dir);
  }
}

Checkpoint torch_save::checkpoint_from(const c10::IValue& value, const std::string& path) {
  if (!value.isGenericDict()) {
    core::raise<CheckpointError>("'{}' holds a {}, not a dict; it is not a rankwise checkpoint",
                                 path, value.tagKind());
  }
  Checkpoint result;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      core::raise<CheckpointError>("'{}' has a non-string key", path);
    }
    result.insert(entry.key().toStringRef(), entry.value());
  }
  return result;
}

Checkpoint load(const std::string& path) {
  return torch_save::checkpoint_from(torch_save::read_checkpoint_file(path), path);
}

Checkpoint load_collective(const std::string& path, CollectiveLoadOptions options) {
  auto file = ranks::read_agreed([&]() -> std::optional<std::string> { return path; }, options);
  return torch_save::checkpoint_from(file->value, path);
}

bool verify(const std::string& path) {
  return torch_save::verify_checkpoint_file(path) == torch_save::Integrity::kVerified;
}

}  // namespace rankwise::checkpoint
