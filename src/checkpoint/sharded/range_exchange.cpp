#include "checkpoint/sharded/range_exchange.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "checkpoint/io/note.h"
#include "checkpoint/ranks/rank_failures.h"
#include "dist/all_gather_ivalues.h"
#include "util/text.h"
#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::checkpoint::sharded {
namespace {

constexpr int64_t kWindowBytes = int64_t{64} << 20;

struct RankView {
  std::string error;
  std::set<std::string> holds;
  std::vector<ExchangeFiles::Short> short_files;
  std::vector<ByteRange> wanted;
};

// One wanted range, as its server streams it.
struct Item {
  int to = 0;
  std::size_t index = 0;  // in rank `to`'s wanted list
  ByteRange range;
  int64_t at = 0;         // its first byte in the server's stream
};

std::vector<RankView> gather_views(const std::vector<ByteRange>& wanted, const std::string& error,
                                   const ExchangeFiles& mine_files) {
  c10::impl::GenericDict mine(c10::StringType::get(), c10::AnyType::get());
  c10::List<std::string> held, files, short_names;
  c10::List<int64_t> offsets, sizes, short_sizes, short_needed;
  for (const auto& h : mine_files.holds) held.push_back(h);
  for (const auto& s : mine_files.short_files) {
    short_names.push_back(s.file);
    short_sizes.push_back(s.size);
    short_needed.push_back(s.needed);
  }
  mine.insert("short_names", short_names);
  mine.insert("short_sizes", short_sizes);
  mine.insert("short_needed", short_needed);
  for (const auto& w : wanted) {
    files.push_back(w.file);
    offsets.push_back(w.offset);
    sizes.push_back(w.size);
  }
  mine.insert("error", error);
  mine.insert("holds", held);
  mine.insert("files", files);
  mine.insert("offsets", offsets);
  mine.insert("sizes", sizes);
  const auto all = dist::all_gather_ivalues(mine);
  std::vector<RankView> views;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto d = all.get(r).toGenericDict();
    RankView v;
    v.error = d.at("error").toStringRef();
    for (const auto& h : d.at("holds").toList()) v.holds.insert(h.get().toStringRef());
    const auto sn = d.at("short_names").toList();
    const auto ss = d.at("short_sizes").toList();
    const auto sd = d.at("short_needed").toList();
    for (std::size_t i = 0; i < sn.size(); ++i) {
      v.short_files.push_back({sn.get(i).toStringRef(), ss.get(i).toInt(), sd.get(i).toInt()});
    }
    const auto f = d.at("files").toList();
    const auto o = d.at("offsets").toList();
    const auto s = d.at("sizes").toList();
    for (std::size_t i = 0; i < f.size(); ++i) {
      v.wanted.push_back(ByteRange{f.get(i).toStringRef(), o.get(i).toInt(), s.get(i).toInt()});
    }
    views.push_back(std::move(v));
  }
  return views;
}

// Every rank throws: its own error when it alone failed, else one message
// naming the ranks that failed and each distinct failure once (rank_failures.h).
[[noreturn]] void raise(const std::vector<std::string>& errors, const std::vector<int>& ranks, int me,
                        const std::string& what) {
  if (errors.size() == 1 && ranks[0] == me) throw CheckpointError(errors[0]);
  core::raise<CheckpointError>(
      core::at(dist::process_group()), "{} failed on {}: {}", what, util::rank_list(ranks),
      ranks::grouped_failures(errors, ranks, dist::process_group().world_size()));
}

}  // namespace

void raise_any(const std::string& error, const std::string& what) {
  const auto all = dist::all_gather_ivalues(c10::IValue(error));
  std::vector<std::string> errors;
  std::vector<int> ranks;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all.get(r).toStringRef().empty()) continue;
    errors.push_back(all.get(r).toStringRef());
    ranks.push_back(static_cast<int>(r));
  }
  if (!errors.empty()) raise(errors, ranks, dist::is_initialized() ? dist::process_group().rank() : 0, what);
}

std::vector<std::pair<ByteRange, std::string>> exchange_ranges(const std::vector<ByteRange>& wanted,
                                                               const std::string& error,
                                                               const ExchangeFiles& files,
                                                               const std::string& what, bool announce) {
  auto& group = dist::process_group();
  const int me = group.rank();
  const int world = group.world_size();
  const auto views = gather_views(wanted, error, files);

  std::vector<std::string> errors;
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (views[static_cast<std::size_t>(r)].error.empty()) continue;
    errors.push_back(views[static_cast<std::size_t>(r)].error);
    failed.push_back(r);
  }
  if (!errors.empty()) raise(errors, failed, me, what);

  // Who serves what: the holders of a file in rank order, spread by (rank + index).
  std::map<std::string, std::vector<int>> holders;
  for (int r = 0; r < world; ++r) {
    for (const auto& f : views[static_cast<std::size_t>(r)].holds) holders[f].push_back(r);
  }
  std::vector<std::vector<Item>> streams(static_cast<std::size_t>(world));
  std::map<std::string, std::vector<int>> unheld;
  std::map<int, int64_t> received;  // bytes per receiving rank
  std::set<int> servers;
  for (int q = 0; q < world; ++q) {
    const auto& list = views[static_cast<std::size_t>(q)].wanted;
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto h = holders.find(list[i].file);
      if (h == holders.end()) {
        auto& ranks = unheld[list[i].file];
        if (ranks.empty() || ranks.back() != q) ranks.push_back(q);
        continue;
      }
      const int s = h->second[(static_cast<std::size_t>(q) + i) % h->second.size()];
      auto& stream = streams[static_cast<std::size_t>(s)];
      const int64_t at = stream.empty() ? 0 : stream.back().at + stream.back().range.size;
      stream.push_back(Item{q, i, list[i], at});
      received[q] += list[i].size;
      servers.insert(s);
    }
  }
  if (!unheld.empty()) {
    std::string text;
    bool truncated = false;
    for (const auto& [file, ranks] : unheld) {
      text += (text.empty() ? "" : "; ") + fmt::format("'{}' (written {}), needed by {}", file,
                                                       files.written_where(file), util::rank_list(ranks));
      // Ranks that see the file, but shorter than .metadata says: cut short, or an older copy.
      std::map<std::pair<int64_t, int64_t>, std::vector<int>> seen_short;
      for (int r = 0; r < world; ++r) {
        for (const auto& s : views[static_cast<std::size_t>(r)].short_files) {
          if (s.file == file) seen_short[{s.size, s.needed}].push_back(r);
        }
      }
      for (const auto& [sizes, ranks_short] : seen_short) {
        truncated = true;
        text += fmt::format(" ({} see it {} bytes long, but '.metadata' points to bytes up to {})",
                            util::rank_list(ranks_short), sizes.first, sizes.second);
      }
    }
    const std::string on_nodes = "the load on nodes that hold the checkpoint's files (the manifest's \"nodes\" say "
                                 "where each was written), or copy them there";
    const std::string advice = truncated ? ". A data file shorter than '.metadata' says is truncated (or an older "
                                           "copy of a stale view): load an earlier checkpoint, or run " + on_nodes
                                         : ". Run " + on_nodes;
    core::raise<CheckpointError>(core::at(group), "{}: no rank sees these data files whole: {}{}",
                                 what, text, advice);
  }
  if (announce && !received.empty()) {
    std::vector<std::string> parts;
    for (const auto& [q, n] : received) parts.push_back(fmt::format("rank {} {} bytes", q, n));
    io::note(
        core::message("note: {}: data files that a rank does not see were sent to it by {} ({})",
                      what, util::rank_list(servers), util::join_strings(parts)));
  }

  std::vector<std::pair<ByteRange, std::string>> out;
  for (const auto& w : wanted) out.emplace_back(w, std::string(static_cast<std::size_t>(w.size), '\0'));
  std::string my_error;
  std::vector<int> failed_servers;
  for (int s = 0; s < world; ++s) {
    const auto& stream = streams[static_cast<std::size_t>(s)];
    if (stream.empty()) continue;
    const int64_t total = stream.back().at + stream.back().range.size + 1;  // + the status byte
    for (int64_t window = 0; window < total; window += kWindowBytes) {
      const int64_t n = std::min(kWindowBytes, total - window);
      at::Tensor buffer = at::zeros({n}, at::kByte);
      char* bytes = reinterpret_cast<char*>(buffer.data_ptr<uint8_t>());
      for (const auto& item : stream) {  // the part of each item inside this window
        const int64_t lo = std::max(window, item.at), hi = std::min(window + n, item.at + item.range.size);
        if (lo >= hi) continue;
        if (me == s && my_error.empty()) {
          try {
            const std::string part =
                files.read(ByteRange{item.range.file, item.range.offset + (lo - item.at), hi - lo});
            std::memcpy(bytes + (lo - window), part.data(), part.size());
          } catch (const std::exception& e) {
            my_error = e.what();
          }
        }
      }
      if (me == s && window + n == total) bytes[n - 1] = my_error.empty() ? 0 : 1;
      group.broadcast(buffer, s);
      for (const auto& item : stream) {
        if (item.to != me) continue;
        const int64_t lo = std::max(window, item.at), hi = std::min(window + n, item.at + item.range.size);
        if (lo >= hi) continue;
        std::memcpy(out[item.index].second.data() + (lo - item.at), bytes + (lo - window),
                    static_cast<std::size_t>(hi - lo));
      }
      if (window + n == total && bytes[n - 1] != 0) failed_servers.push_back(s);
    }
  }
  if (!my_error.empty()) throw CheckpointError(my_error);
  if (!failed_servers.empty()) {
    core::raise<CheckpointError>(
        core::at(group),
        "{}: {} could not read the data files they were to send (their own errors say why)", what,
        util::rank_list(failed_servers));
  }
  return out;
}

}  // namespace rankwise::checkpoint::sharded
