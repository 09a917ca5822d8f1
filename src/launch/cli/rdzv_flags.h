#pragma once
/// \file rdzv_flags.h
/// torchrun's rendezvous flags, parsed: `--rdzv-backend`, `--rdzv-endpoint`
/// and `--rdzv-conf`. Both backends accepted mean rankwise's own rendezvous
/// over node 0's c10d TCPStore (node_rendezvous.h); parse.cpp maps the values onto
/// LaunchOptions. Every function throws UsageError naming the flag, the value
/// at fault and what is accepted.

#include <chrono>
#include <optional>
#include <string>

namespace rankwise::launch::cli {

/// The port torchrun's c10d backend uses when `--rdzv-endpoint` has none.
constexpr int kDefaultRdzvPort = 29400;

/// `--rdzv-backend`. kStatic (torchrun's default): node ranks come from
/// --node-rank. kC10d: without --node-rank, the node that hosts the store is
/// node 0 and the others take 1, 2, ... as they join.
enum class RdzvBackend { kStatic, kC10d };

/// "static" or "c10d"; anything else (etcd, etcd-v2, ...) throws.
RdzvBackend parse_rdzv_backend(const std::string& text);

/// A `--rdzv-endpoint` HOST[:PORT]: a host name, an IPv4 address, or an
/// IPv6 address in brackets ("[::1]:29400", "[::1]"; the host is returned
/// without them). Port 0 means a free port (one node only, checked by the
/// caller); no port: nullopt.
struct Endpoint {
  std::string host;
  std::optional<int> port;
};
Endpoint parse_endpoint(const std::string& text);

/// `host` without the brackets of an IPv6 literal ("[::1]" -> "::1"), as
/// torchrun's --master-addr takes it; any other host unchanged.
std::string without_brackets(const std::string& host);

/// `--rdzv-conf key=value,...` (torchrun's syntax; spaces around keys and
/// values are ignored). Keys: join_timeout (alias timeout, the name of
/// torchrun's static backend), read_timeout, last_call_timeout,
/// keep_alive_interval (seconds > 0), keep_alive_max_attempt (an integer > 0),
/// is_host (1/0, true/false, t/f, yes/no, y/n, any case). Unknown keys, a key
/// given twice and values that do not parse throw, naming the key.
struct RdzvConf {
  /// How long the nodes wait for each other (the rendezvous timeout).
  std::optional<std::chrono::milliseconds> join_timeout;
  /// How long connecting to node 0's store and each store call may take.
  std::optional<std::chrono::milliseconds> read_timeout;
  /// Elastic --nnodes MIN:MAX: how long a round stays open for more nodes
  /// once MIN have joined (LaunchOptions::last_call_timeout); unused otherwise.
  std::optional<std::chrono::milliseconds> last_call_timeout;
  /// Whether this node hosts the store (instead of "node 0 hosts it").
  std::optional<bool> is_host;
  /// torchelastic's keep-alive: a launcher silent for interval x max_attempt
  /// is lost (LaunchOptions::launcher_silence_limit).
  std::optional<std::chrono::milliseconds> keep_alive_interval;
  std::optional<int> keep_alive_max_attempt;
};
RdzvConf parse_rdzv_conf(const std::string& text);

}  // namespace rankwise::launch::cli
