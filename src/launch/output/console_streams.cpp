#include "launch/output/console_streams.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "util/text.h"
#include "launch/cli/index_list.h"
#include "launch/options.h"

namespace rankwise::launch::output {

namespace {

unsigned at(const std::vector<unsigned>& streams, int local_rank) {
  return local_rank >= 0 && static_cast<std::size_t>(local_rank) < streams.size()
             ? streams[static_cast<std::size_t>(local_rank)]
             : kNoStream;
}

bool contains(const std::vector<int>& list, int value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

std::vector<unsigned> parse_stream_spec(const std::string& text, const char* flag,
                                        int nproc_per_node) {
  const auto bad = [&](const std::string& why) {
    return UsageError(fmt::format(
        "{} '{}': {}; give 0 (none), 1 (stdout), 2 (stderr) or 3 (both) for every local rank, "
        "or LOCAL_RANK:N pairs such as {} 0:3,1:2",
        flag, text, why, flag));
  };
  const auto streams = [&](const std::string& digit) {
    const auto v = cli::decimal(digit);
    if (!v || *v < 0 || *v > 3) throw bad(fmt::format("'{}' is not 0, 1, 2 or 3", digit));
    return static_cast<unsigned>(*v);
  };
  if (text.find(':') == std::string::npos) {
    return std::vector<unsigned>(static_cast<std::size_t>(nproc_per_node), streams(text));
  }
  std::vector<unsigned> result(static_cast<std::size_t>(nproc_per_node), kNoStream);
  std::vector<int> seen;
  // The same list splitting as --iface: empty entries are kept, to be named.
  for (const std::string& pair : rankwise::util::split_list(text)) {
    const auto colon = pair.find(':');
    if (colon == std::string::npos) throw bad(fmt::format("'{}' is not LOCAL_RANK:N", pair));
    const auto local_rank = cli::decimal(pair.substr(0, colon));
    if (!local_rank || *local_rank < 0 || *local_rank >= nproc_per_node) {
      throw bad(fmt::format("'{}' is not a local rank in [0, {}) (--nproc-per-node {})",
                            pair.substr(0, colon), nproc_per_node, nproc_per_node));
    }
    const int l = static_cast<int>(*local_rank);
    if (contains(seen, l)) throw bad(fmt::format("local rank {} is given twice", l));
    seen.push_back(l);
    result[static_cast<std::size_t>(l)] = streams(pair.substr(colon + 1));
  }
  return result;
}

unsigned console_streams(const LaunchOptions& o, int local_rank, int rank) {
  if (!o.local_ranks_filter.empty() && !contains(o.local_ranks_filter, local_rank)) {
    return kNoStream;
  }
  unsigned shown = (kBothStreams & ~at(o.redirects, local_rank)) | at(o.tee, local_rank);
  if (!o.only_ranks.empty() && !contains(o.only_ranks, rank)) shown &= ~kStdoutBit;
  return shown;
}

bool redirects_to_files(const LaunchOptions& o) {
  const auto any = [](const std::vector<unsigned>& v) {
    return std::any_of(v.begin(), v.end(), [](unsigned s) { return s != kNoStream; });
  };
  return any(o.redirects) || any(o.tee);
}

}  // namespace rankwise::launch::output
