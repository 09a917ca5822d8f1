#include "checkpoint/sharded/range_exchange.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
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

// The columns of a list of items with a string and two integers (ByteRange, ExchangeFiles::Short),
// as all_gather_ivalues carries them: three lists under `names`.
template <typename T>
struct Columns {
  std::array<const char*, 3> names;
  std::string T::*text;
  int64_t T::*first;
  int64_t T::*second;

  void insert(c10::impl::GenericDict& dict, const std::vector<T>& items) const {
    c10::List<std::string> texts;
    c10::List<int64_t> firsts, seconds;
    for (const auto& item : items) {
      texts.push_back(item.*text);
      firsts.push_back(item.*first);
      seconds.push_back(item.*second);
    }
    dict.insert(names[0], texts);
    dict.insert(names[1], firsts);
    dict.insert(names[2], seconds);
  }

  std::vector<T> read(const c10::impl::GenericDict& dict) const {
    const auto texts = dict.at(names[0]).toList();
    const auto firsts = dict.at(names[1]).toList();
    const auto seconds = dict.at(names[2]).toList();
    std::vector<T> items(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      items[i].*text = texts.get(i).toStringRef();
      items[i].*first = firsts.get(i).toInt();
      items[i].*second = seconds.get(i).toInt();
    }
    return items;
  }
};

const Columns<ExchangeFiles::Short> kShortColumns{{"short_names", "short_sizes", "short_needed"},
                                                  &ExchangeFiles::Short::file,
                                                  &ExchangeFiles::Short::size,
                                                  &ExchangeFiles::Short::needed};
const Columns<ByteRange> kWantedColumns{{"files", "offsets", "sizes"}, &ByteRange::file, &ByteRange::offset,
                                        &ByteRange::size};

std::vector<RankView> gather_views(const std::vector<ByteRange>& wanted, const std::string& error,
                                   const ExchangeFiles& mine_files) {
  c10::impl::GenericDict mine(c10::StringType::get(), c10::AnyType::get());
  c10::List<std::string> held;
  for (const auto& h : mine_files.holds) held.push_back(h);
  kShortColumns.insert(mine, mine_files.short_files);
  mine.insert("error", error);
  mine.insert("holds", held);
  kWantedColumns.insert(mine, wanted);
  const auto all = dist::all_gather_ivalues(mine);
  std::vector<RankView> views;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto d = all.get(r).toGenericDict();
    RankView v;
    v.error = d.at("error").toStringRef();
    for (const auto& h : d.at("holds").toList()) v.holds.insert(h.get().toStringRef());
    v.short_files = kShortColumns.read(d);
    v.wanted = kWantedColumns.read(d);
    views.push_back(std::move(v));
  }
  return views;
}

// Every rank throws when any rank's entry of `errors` (rank r's at r) is not
// empty: its own error when it alone failed, else one message naming the
// ranks that failed and each distinct failure once (rank_failures.h).
void raise_if_any(const std::vector<std::string>& errors, int me, const std::string& what) {
  std::vector<std::string> failures;
  std::vector<int> ranks;
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    failures.push_back(errors[r]);
    ranks.push_back(static_cast<int>(r));
  }
  if (failures.empty()) return;
  if (failures.size() == 1 && ranks[0] == me) throw CheckpointError(failures[0]);
  core::raise<CheckpointError>(
      core::at(dist::process_group()), "{} failed on {}: {}", what, util::rank_list(ranks),
      ranks::grouped_failures(failures, ranks, dist::process_group().world_size()));
}

// Who serves what: each server's stream of wanted ranges, and what no rank holds.
struct Plan {
  std::vector<std::vector<Item>> streams;            // by serving rank
  std::map<std::string, std::vector<int>> unheld;    // file -> ranks that want it
  std::map<int, int64_t> received;                   // bytes per receiving rank
  std::set<int> servers;
};

// The holders of a file in rank order, spread by (rank + index): the same plan on every rank.
Plan plan_streams(const std::vector<RankView>& views) {
  const std::size_t world = views.size();
  std::map<std::string, std::vector<int>> holders;
  for (std::size_t r = 0; r < world; ++r) {
    for (const auto& f : views[r].holds) holders[f].push_back(static_cast<int>(r));
  }
  Plan plan;
  plan.streams.resize(world);
  for (std::size_t q = 0; q < world; ++q) {
    const auto& list = views[q].wanted;
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto h = holders.find(list[i].file);
      if (h == holders.end()) {
        auto& ranks = plan.unheld[list[i].file];
        if (ranks.empty() || ranks.back() != static_cast<int>(q)) ranks.push_back(static_cast<int>(q));
        continue;
      }
      const int s = h->second[(q + i) % h->second.size()];
      auto& stream = plan.streams[static_cast<std::size_t>(s)];
      const int64_t at = stream.empty() ? 0 : stream.back().at + stream.back().range.size;
      stream.push_back(Item{static_cast<int>(q), i, list[i], at});
      plan.received[static_cast<int>(q)] += list[i].size;
      plan.servers.insert(s);
    }
  }
  return plan;
}

// Throws naming each file no rank holds whole, who needs it, where it was written, and the
// ranks that see it shorter than .metadata says.
[[noreturn]] void raise_unheld(const std::map<std::string, std::vector<int>>& unheld,
                               const std::vector<RankView>& views, const ExchangeFiles& files,
                               const std::string& what) {
  std::string text;
  bool truncated = false;
  for (const auto& [file, ranks] : unheld) {
    text += (text.empty() ? "" : "; ") + fmt::format("'{}' (written {}), needed by {}", file,
                                                     files.written_where(file), util::rank_list(ranks));
    // Ranks that see the file, but shorter than .metadata says: cut short, or an older copy.
    std::map<std::pair<int64_t, int64_t>, std::vector<int>> seen_short;
    for (std::size_t r = 0; r < views.size(); ++r) {
      for (const auto& s : views[r].short_files) {
        if (s.file == file) seen_short[{s.size, s.needed}].push_back(static_cast<int>(r));
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
  core::raise<CheckpointError>(core::at(dist::process_group()), "{}: no rank sees these data files whole: {}{}",
                               what, text, advice);
}

// Rank 0's note naming the ranks that receive bytes, how many, and from whom.
void announce(const Plan& plan, const std::string& what) {
  if (plan.received.empty()) return;
  std::vector<std::string> parts;
  for (const auto& [q, n] : plan.received) parts.push_back(fmt::format("rank {} {} bytes", q, n));
  io::note(core::message("note: {}: data files that a rank does not see were sent to it by {} ({})", what,
                         util::rank_list(plan.servers), util::join_strings(parts)));
}

// The part [lo, hi) of `item` inside the window [window, window + n), in stream positions; empty when lo >= hi.
std::pair<int64_t, int64_t> overlap(const Item& item, int64_t window, int64_t n) {
  return {std::max(window, item.at), std::min(window + n, item.at + item.range.size)};
}

// Server `s`'s stream, broadcast window by window (its last byte says whether the server read
// every range); this rank's items are copied into `out`. `my_error` keeps this rank's first read
// failure as a server. Returns false when the server could not read its ranges.
bool broadcast_stream(dist::ProcessGroup& group, int s, const std::vector<Item>& stream,
                      const ExchangeFiles& files, std::vector<std::pair<ByteRange, std::string>>& out,
                      std::string& my_error) {
  const int me = group.rank();
  const int64_t total = stream.back().at + stream.back().range.size + 1;  // + the status byte
  bool served = true;
  for (int64_t window = 0; window < total; window += kWindowBytes) {
    const int64_t n = std::min(kWindowBytes, total - window);
    at::Tensor buffer = at::zeros({n}, at::kByte);
    char* bytes = reinterpret_cast<char*>(buffer.data_ptr<uint8_t>());
    for (const auto& item : stream) {  // the part of each item inside this window
      const auto [lo, hi] = overlap(item, window, n);
      if (lo >= hi || me != s || !my_error.empty()) continue;
      try {
        const std::string part = files.read(ByteRange{item.range.file, item.range.offset + (lo - item.at), hi - lo});
        std::memcpy(bytes + (lo - window), part.data(), part.size());
      } catch (const std::exception& e) {
        my_error = e.what();
      }
    }
    if (me == s && window + n == total) bytes[n - 1] = my_error.empty() ? 0 : 1;
    group.broadcast(buffer, s);
    for (const auto& item : stream) {
      if (item.to != me) continue;
      const auto [lo, hi] = overlap(item, window, n);
      if (lo >= hi) continue;
      std::memcpy(out[item.index].second.data() + (lo - item.at), bytes + (lo - window),
                  static_cast<std::size_t>(hi - lo));
    }
    if (window + n == total && bytes[n - 1] != 0) served = false;
  }
  return served;
}

}  // namespace

void raise_any(const std::string& error, const std::string& what) {
  const auto all = dist::all_gather_ivalues(c10::IValue(error));
  std::vector<std::string> errors;
  for (std::size_t r = 0; r < all.size(); ++r) errors.push_back(all.get(r).toStringRef());
  raise_if_any(errors, dist::rank_or_zero(), what);
}

std::vector<std::pair<ByteRange, std::string>> exchange_ranges(const std::vector<ByteRange>& wanted,
                                                               const std::string& error,
                                                               const ExchangeFiles& files,
                                                               const std::string& what, bool announce_bytes) {
  auto& group = dist::process_group();
  const auto views = gather_views(wanted, error, files);
  std::vector<std::string> errors;
  for (const auto& v : views) errors.push_back(v.error);
  raise_if_any(errors, group.rank(), what);

  const Plan plan = plan_streams(views);
  if (!plan.unheld.empty()) raise_unheld(plan.unheld, views, files, what);
  if (announce_bytes) announce(plan, what);

  std::vector<std::pair<ByteRange, std::string>> out;
  for (const auto& w : wanted) out.emplace_back(w, std::string(static_cast<std::size_t>(w.size), '\0'));
  std::string my_error;
  std::vector<int> failed_servers;
  for (int s = 0; s < group.world_size(); ++s) {
    const auto& stream = plan.streams[static_cast<std::size_t>(s)];
    if (stream.empty()) continue;
    if (!broadcast_stream(group, s, stream, files, out, my_error)) failed_servers.push_back(s);
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
