#include "launch/watch/monitor_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace rankwise::launch::watch {

namespace {

constexpr std::size_t kColumns = 11;
// Left-aligned columns (text); the others are numbers, right-aligned.
constexpr std::array<bool, kColumns> kLeft = {false, true,  true,  false, false, false,
                                              false, false, false, false, true};

std::array<std::string, kColumns> cells(const MonitorRow& r) {
  const bool timed = r.step >= 0 && r.step_ms > 0;
  return {fmt::format("{}", r.rank),
          r.host.empty() ? "-" : r.host,
          r.device.empty() ? "-" : r.device,
          r.step >= 0 ? fmt::format("{}", r.step) : "-",
          timed ? fmt::format("{:.0f}", r.samples_per_s) : "-",
          timed ? fmt::format("{:.1f}", std::max(0.0, r.step_ms - r.wait_ms)) : "-",
          timed ? fmt::format("{:.1f}", r.wait_ms) : "-",
          r.loss ? fmt::format("{:.4g}", *r.loss) : "-",
          r.rss_bytes > 0 ? fmt::format("{:.0f} MiB", r.rss_bytes / 1048576.0) : "-",
          r.heartbeat_age ? fmt::format("{:.1f} s", r.heartbeat_age->count() / 1000.0) : "-",
          r.state};
}

}  // namespace

std::vector<std::string> format_monitor_table(const std::vector<MonitorRow>& rows) {
  std::vector<std::array<std::string, kColumns>> table;
  table.push_back({"rank", "host", "device", "step", "samples/s", "compute ms", "wait ms", "loss",
                   "rss", "heartbeat", "state"});
  for (const MonitorRow& r : rows) table.push_back(cells(r));
  std::array<std::size_t, kColumns> width{};
  for (const auto& line : table) {
    for (std::size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], line[c].size());
  }
  std::vector<std::string> out;
  for (const auto& line : table) {
    std::string text;
    for (std::size_t c = 0; c < kColumns; ++c) {
      if (c > 0) text += "  ";
      const std::string pad(width[c] - line[c].size(), ' ');
      text += kLeft[c] ? line[c] + (c + 1 == kColumns ? "" : pad) : pad + line[c];
    }
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace rankwise::launch::watch
