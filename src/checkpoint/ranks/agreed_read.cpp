#include "checkpoint/ranks/agreed_read.h"

#include "core/check.h"

#include <torch/types.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "checkpoint/torch_save/checkpoint_file.h"
#include "checkpoint/io/note.h"
#include "checkpoint/ranks/rank_zero.h"
#include "dist/all_gather_ivalues.h"
#include "util/host_name.h"
#include "util/text.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint::ranks {
namespace {

constexpr auto kRetryInterval = std::chrono::milliseconds(100);

c10::impl::GenericDict new_dict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

std::string describe(const torch_save::FileIdentity& id) {
  return fmt::format("{} bytes, CRC-32 {:08x} ({})", id.size, id.crc, id.recorded ? "recorded" : "computed");
}

// The first line of a CheckpointError's message, without the "rankwise: " prefix.
std::string short_reason(const std::string& what) {
  const std::string text = core::unprefixed(what);
  return text.substr(0, text.find('\n'));
}

// Rank 0's file, broadcast to every rank: its size, then its bytes. Rank 0
// sends size -1 when it cannot read the file; every rank then throws.
std::string broadcast_file(dist::ProcessGroup& group, const std::string& path) {
  std::string bytes;
  std::string error;
  auto size = torch::zeros({1}, torch::kInt64);
  if (group.rank() == 0) {
    try {
      bytes = torch_save::read_file_bytes(path);
      size[0] = static_cast<int64_t>(bytes.size());
    } catch (const CheckpointError& e) {
      error = e.what();
      size[0] = -1;
    }
  }
  group.broadcast(size, 0);
  const int64_t n = size[0].item<int64_t>();
  if (n < 0) {
    throw CheckpointError(
        group.rank() == 0
            ? error
            : core::message("rank 0 could not reread checkpoint '{}' to send it to the other ranks",
                            path));
  }
  auto buffer = torch::empty({n}, torch::kUInt8);
  if (group.rank() == 0 && n > 0) std::memcpy(buffer.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  group.broadcast(buffer, 0);
  if (group.rank() != 0) bytes.assign(reinterpret_cast<const char*>(buffer.data_ptr<uint8_t>()), n);
  return bytes;
}

// Rank 0's file, as every rank learns it.
struct Decided {
  std::string path;
  torch_save::FileIdentity identity;
};

// Step 1: rank 0 chooses the file and announces its identity (or an error, or none).
std::optional<Decided> decide(const std::function<std::optional<std::string>()>& choose) {
  const auto decided = decided_on_rank_zero([&](c10::impl::GenericDict& decided) {
    const auto path = choose();
    if (!path) return;
    const torch_save::FileIdentity id = torch_save::identify_checkpoint_file(*path);
    decided.insert("path", *path);
    decided.insert("size", static_cast<int64_t>(id.size));
    decided.insert("crc", static_cast<int64_t>(id.crc));
    decided.insert("recorded", id.recorded);
  });
  if (!decided.contains("path")) return std::nullopt;
  return Decided{decided.at("path").toStringRef(),
                 torch_save::FileIdentity{static_cast<uint64_t>(decided.at("size").toInt()),
                                          static_cast<uint32_t>(decided.at("crc").toInt()),
                                          decided.at("recorded").toBool()}};
}

// How long a rank waits for its view to be rank 0's file.
std::chrono::milliseconds wait_bound(const CollectiveLoadOptions& options) {
  return options.node_local() ? std::chrono::milliseconds(0) : options.stale_timeout();
}

// Step 2 (every rank but 0): whether this rank's view is rank 0's file within the bound; what
// it saw instead goes to `seen`.
bool wait_for_view(const Decided& file, const CollectiveLoadOptions& options, std::string& seen) {
  const auto deadline = std::chrono::steady_clock::now() + wait_bound(options);
  for (;;) {
    bool have = false;
    try {
      const torch_save::FileIdentity mine = torch_save::identify_checkpoint_file(file.path);
      have = mine == file.identity;
      if (!have) seen = fmt::format("another file ({})", describe(mine));
    } catch (const CheckpointError& e) {
      seen = short_reason(e.what());
    }
    if (have || std::chrono::steady_clock::now() >= deadline) return have;
    std::this_thread::sleep_for(kRetryInterval);
  }
}

// Step 3: who lacks the file (an all_gather of every rank's view); rank 0 notes them and sends
// them its bytes. Returns the bytes received ("" when every rank has the file).
std::string send_to_lacking(dist::ProcessGroup& group, const Decided& file, const CollectiveLoadOptions& options,
                            bool have, const std::string& seen) {
  auto view = new_dict();
  view.insert("have", have);
  view.insert("seen", seen);
  view.insert("host", util::host_name());
  const auto views = dist::all_gather_ivalues(view);
  std::vector<int> lacking;
  std::map<std::string, std::vector<int>> by_reason;
  for (std::size_t r = 0; r < views.size(); ++r) {
    const auto v = views.get(r).toGenericDict();
    if (v.at("have").toBool()) continue;
    lacking.push_back(static_cast<int>(r));
    by_reason[fmt::format("on host {}: {}", v.at("host").toStringRef(), v.at("seen").toStringRef())]
        .push_back(static_cast<int>(r));
  }
  if (lacking.empty()) return {};
  std::vector<std::string> reasons;
  for (const auto& [reason, ranks] : by_reason) reasons.push_back(fmt::format("{} {}", util::rank_list(ranks), reason));
  const auto waited = wait_bound(options);
  io::note(core::message(
      "note: {} did not see checkpoint '{}' as rank 0 reads it ({}){} [{}]; rank 0 sends them "
      "its bytes{}",
      util::rank_list(lacking), file.path, describe(file.identity),
      (waited.count() > 0 ? fmt::format(" after waiting {} ms", waited.count()) : ""),
      util::join_strings(reasons, "; "),
      (options.node_local() ? ""
                            : ". If the checkpoint directory is on each node's own disk, set "
                              "node_local to skip the wait")));
  return broadcast_file(group, file.path);
}

}  // namespace

std::optional<AgreedFile> read_agreed(const std::function<std::optional<std::string>()>& choose,
                                      const CollectiveLoadOptions& options) {
  if (!dist::is_initialized() || dist::process_group().world_size() == 1) {
    auto path = choose();
    if (!path) return std::nullopt;
    return AgreedFile{*path, torch_save::read_checkpoint_file(*path)};
  }
  auto& group = dist::process_group();
  // 1. Rank 0 chooses the file and announces its identity (or an error, or none).
  const auto file = decide(choose);
  if (!file) return std::nullopt;
  // 2. Every other rank waits, within the bound, for its view to be rank 0's file.
  std::string seen;
  const bool have = group.rank() == 0 || wait_for_view(*file, options, seen);
  // 3. Who lacks it; rank 0 sends it to them.
  const std::string bytes = send_to_lacking(group, *file, options, have, seen);
  // 4. Verified before anything is unpickled, on every rank.
  if (have) return AgreedFile{file->path, torch_save::read_checkpoint_file(file->path)};
  return AgreedFile{file->path, torch_save::read_checkpoint_bytes(bytes, file->path + " (as received from rank 0)")};
}

}  // namespace rankwise::checkpoint::ranks
