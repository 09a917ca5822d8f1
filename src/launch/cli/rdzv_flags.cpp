#include "launch/cli/rdzv_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "util/text.h"
#include "launch/cli/parse.h"

namespace rankwise::launch::cli {

namespace {

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// An integer >= 1, e.g. keep_alive_max_attempt's.
int positive_count(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (*end != '\0' || n < 1 || n > 1000000) {
    throw UsageError(fmt::format("--rdzv-conf {}={}: not a whole number from 1 to 1000000", key, value));
  }
  return static_cast<int>(n);
}

constexpr const char* kSupportedConf =
    "join_timeout, read_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt, "
    "is_host";

}  // namespace

RdzvBackend parse_rdzv_backend(const std::string& text) {
  if (text == "static") return RdzvBackend::kStatic;
  if (text == "c10d") return RdzvBackend::kC10d;
  throw UsageError(fmt::format(
      "--rdzv-backend '{}': not supported; rankwise-run's rendezvous is a c10d TCPStore hosted by "
      "one node's launcher: give --rdzv-backend c10d (or static, the default) with "
      "--rdzv-endpoint HOST:PORT (etcd and etcd-v2 need torchrun)",
      text));
}

std::string without_brackets(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

Endpoint parse_endpoint(const std::string& given) {
  const std::string text = trimmed(given);
  const auto bad = [&](const std::string& why) {
    return UsageError(fmt::format(
        "--rdzv-endpoint '{}': {}; give HOST[:PORT] such as --rdzv-endpoint node0:29400 "
        "(an IPv6 address in brackets: [fd00::1]:29400)",
        given, why));
  };
  Endpoint e;
  std::string host = text, port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) throw bad("'[' without ']'");
    host = text.substr(1, close - 1);
    const std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw bad(fmt::format("'{}' after the address", rest));
      port = rest.substr(1);
      if (port.empty()) throw bad("no port after ':'");
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string::npos) {
    if (text.find(':') != colon) throw bad("an IPv6 address needs brackets");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) throw bad("no port after ':'");
  }
  if (host.empty() || host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789.-_:") != std::string::npos) {
    throw bad("the host must be a name, an IPv4 address or an IPv6 address");
  }
  e.host = host;
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) > 65535) {
      throw bad(fmt::format("port '{}' is not a number in [0, 65535]", port));
    }
    e.port = std::stoi(port);
  }
  return e;
}

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  if (trimmed(text).empty()) return conf;
  std::vector<std::string> seen;
  for (const std::string& item : rankwise::util::split_list(text)) {
    const auto eq = item.find('=');
    const std::string key = trimmed(item.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : trimmed(item.substr(eq + 1));
    if (key.empty()) {
      throw UsageError(fmt::format(
          "--rdzv-conf {}: not key=value; give key=value pairs separated by commas, e.g. "
          "--rdzv-conf join_timeout=600,is_host=1",
          item));
    }
    if (value.empty()) {
      throw UsageError(fmt::format("--rdzv-conf {}=: {} has no value; e.g. --rdzv-conf {}=600", key,
                                   key, key));
    }
    const std::string name = key == "timeout" ? "join_timeout" : key;
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      throw UsageError(fmt::format("--rdzv-conf {}={}: {} is given twice; give it once", key, value, name));
    }
    seen.push_back(name);
    const auto seconds = [&] {
      char* end = nullptr;
      const double s = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(s > 0) || s > 1e9) {
        throw UsageError(fmt::format(
            "--rdzv-conf {}={}: not a number of seconds above 0 (and at most 1e9)", key, value));
      }
      return cli::seconds_to_ms(s, "--rdzv-conf", false);
    };
    if (name == "join_timeout") {
      conf.join_timeout = seconds();
    } else if (name == "read_timeout") {
      conf.read_timeout = seconds();
    } else if (name == "last_call_timeout") {
      conf.last_call_timeout = seconds();
    } else if (name == "keep_alive_interval") {
      conf.keep_alive_interval = seconds();
    } else if (name == "keep_alive_max_attempt") {
      conf.keep_alive_max_attempt = positive_count(key, value);
    } else if (name == "is_host") {
      const std::string v = lower(value);
      if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") {
        conf.is_host = true;
      } else if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") {
        conf.is_host = false;
      } else {
        throw UsageError(fmt::format(
            "--rdzv-conf is_host={}: not a boolean; give is_host=1 or is_host=0", value));
      }
    } else {
      throw UsageError(fmt::format(
          "--rdzv-conf {}={}: unknown key {}; rankwise-run supports {} (and timeout, the same as "
          "join_timeout)",
          key, value, key, kSupportedConf));
    }
  }
  return conf;
}

}  // namespace rankwise::launch::cli
