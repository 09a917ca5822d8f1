// load_sharded_collective(): load_sharded() for ranks whose views of the
// directory differ: node-local disks (each node holds its own ranks' data
// files) or a network filesystem whose caches are stale.
#include <fmt/format.h>

#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "checkpoint/io/atomic_file.h"
#include "checkpoint/sharded/range_exchange.h"
#include "checkpoint/sharded/reader.h"
#include "dist/all_gather_ivalues.h"
#include "util/text.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint {
namespace {

constexpr const char* kWhat = "load_sharded_collective";
constexpr auto kRetryInterval = std::chrono::milliseconds(100);

// Rank 0's .metadata and manifest, on every rank (or rank 0's error, raised on every rank).
sharded::CheckpointFiles rank_zero_files(sharded::ShardedReader& reader) {
  c10::impl::GenericDict mine(c10::StringType::get(), c10::AnyType::get());
  if (dist::process_group().rank() == 0) {
    try {
      const auto files = reader.read_files();
      mine.insert("metadata", files.metadata);
      mine.insert("has_manifest", files.has_manifest);
      mine.insert("manifest", files.manifest);
    } catch (const CheckpointError& e) {
      mine.insert("error", std::string(e.what()));
    }
  }
  const auto zero = dist::all_gather_ivalues(mine).get(0).toGenericDict();
  if (zero.contains("error")) {
    const std::string error = zero.at("error").toStringRef();
    throw CheckpointError(dist::process_group().rank() == 0 ? error : error + " (raised on rank 0, which reads first)");
  }
  return {zero.at("metadata").toStringRef(), zero.at("has_manifest").toBool(), zero.at("manifest").toStringRef()};
}

// Whether this rank's view of the directory is rank 0's checkpoint: its
// .metadata and manifest are the same bytes. Rereads every 100 ms up to `bound`.
bool same_view(const sharded::ShardedReader& reader, const sharded::CheckpointFiles& zero,
               std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    try {
      const auto mine = reader.read_files();
      if (mine.metadata == zero.metadata && mine.has_manifest == zero.has_manifest && mine.manifest == zero.manifest) {
        return true;
      }
    } catch (const CheckpointError&) {
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kRetryInterval);
  }
}

// Where the manifest says `file` was written.
std::string written_where(const sharded::ShardedReader& reader, const std::string& file) {
  if (reader.manifest()) {
    for (const auto& node : reader.manifest()->nodes) {
      for (std::size_t i = 0; i < node.files.size(); ++i) {
        if (node.files[i] == file) {
          return fmt::format("by rank {} on host {} (the storage node of {})", node.ranks[i],
                             util::join_strings(node.hosts), util::rank_list(node.ranks));
        }
      }
    }
  }
  return "at an unrecorded place";
}

// The data files of rank 0's checkpoint as this rank sees them.
struct SeenFiles {
  std::vector<std::string> holds;                      // there whole: this rank reads them itself
  std::vector<sharded::ExchangeFiles::Short> short_files;  // there, shorter than .metadata says
  std::set<std::string> local;                         // `holds`, as a set
};

// The files of rank 0's checkpoint that this rank sees whole (a node-local disk holds only its own ranks').
SeenFiles seen_files(const sharded::ShardedReader& reader, const std::string& dir) {
  std::map<std::string, int64_t> ends;
  for (const auto& [key, t] : reader.metadata().tensors) {
    for (const auto& c : t.chunks) ends[c.relative_path] = std::max(ends[c.relative_path], c.offset + c.length);
  }
  for (const auto& [key, o] : reader.metadata().objects) {
    ends[o.relative_path] = std::max(ends[o.relative_path], o.offset + o.length);
  }
  SeenFiles seen;
  for (const auto& [file, end] : ends) {
    struct stat st {};
    if (::stat((dir + "/" + file).c_str(), &st) != 0) continue;
    if (st.st_size >= end) {
      seen.holds.push_back(file);
      seen.local.insert(file);
    } else {
      seen.short_files.push_back({file, static_cast<int64_t>(st.st_size), end});
    }
  }
  return seen;
}

// One round of the exchange: the ranges `ranges()` names that are in files this rank does not
// see (none once this rank has failed) come from ranks that do, and the reader serves them from
// then on. A failure goes to `error`, for the next collective step to raise on every rank: a rank
// that threw alone would leave the others' collectives out of step.
void fetch_round(sharded::ShardedReader& reader, const SeenFiles& seen, const sharded::ExchangeFiles& files,
                 const std::function<std::vector<sharded::ByteRange>()>& ranges, std::string& error,
                 bool announce) {
  std::vector<sharded::ByteRange> wanted;
  if (error.empty()) {
    try {
      for (auto& r : ranges()) {
        if (!seen.local.count(r.file) && r.size > 0) wanted.push_back(std::move(r));
      }
    } catch (const std::exception& e) {
      error = e.what();
      wanted.clear();
    }
  }
  auto fetched = sharded::exchange_ranges(wanted, error, files, kWhat, announce);
  try {
    reader.serve_from(seen.local, std::move(fetched));
  } catch (const std::exception& e) {
    error = e.what();
  }
}

}  // namespace

void load_sharded_collective(const std::string& dir_in, ShardedState& state, CollectiveLoadOptions options,
                             ShardedLoadOptions keys) {
  if (!dist::is_initialized() || dist::process_group().world_size() == 1) {
    load_sharded(dir_in, state, keys);
    return;
  }
  const std::string dir = io::without_trailing_slash(dir_in);
  sharded::ShardedReader reader(dir, kWhat, keys);
  const sharded::CheckpointFiles zero = rank_zero_files(reader);

  // This rank's view: rank 0's checkpoint (after waiting out a stale cache), or not.
  const bool same = dist::process_group().rank() == 0 ||
                    same_view(reader, zero, options.node_local() ? std::chrono::milliseconds(0)
                                                                 : options.stale_timeout());
  std::string error;
  std::vector<sharded::Piece> pieces;
  SeenFiles seen;
  try {
    reader.open(zero);
    pieces = reader.plan(state);
    if (same) seen = seen_files(reader, dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  sharded::ExchangeFiles files;
  files.holds = seen.holds;
  files.short_files = seen.short_files;
  files.read = [&](const sharded::ByteRange& range) { return reader.read_local(range); };
  files.written_where = [&](const std::string& file) { return written_where(reader, file); };

  // 1. The records' headers and trailers, and the objects' records, of files this rank does not see.
  fetch_round(reader, seen, files, [&] {
    auto records = reader.record_ranges(pieces);
    for (auto& range : reader.object_ranges(state)) records.push_back(std::move(range));
    return records;
  }, error, false);
  // 2. The storage bytes those records hold that this rank needs.
  fetch_round(reader, seen, files, [&] {
    std::vector<sharded::ByteRange> data;
    for (const auto& piece : pieces) data.push_back(reader.data_range(piece));
    return data;
  }, error, true);
  // 3. Every byte verified against the manifest as it is copied; a failure on any rank is raised on every rank.
  try {
    if (error.empty()) {
      for (const auto& piece : pieces) reader.copy(piece);
      reader.read_objects(state);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  sharded::raise_any(error, kWhat);
}

}  // namespace rankwise::checkpoint
