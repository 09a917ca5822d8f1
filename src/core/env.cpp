#include "rankwise/env.h"

#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include <mutex>
#include <optional>

#include "core/check.h"
#include "core/process_env.h"
#include "rankwise/error.h"
#include "wire/worker_env.h"

extern char** environ;

namespace rankwise {
namespace {

using Vars = std::map<std::string, std::string>;

std::optional<std::string> lookup(const Vars& vars, const std::string& name) {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

int parse_int(const Vars& vars, const std::string& name, int fallback, int min_value,
              int max_value = std::numeric_limits<int>::max()) {
  auto value = lookup(vars, name);
  if (!value) return fallback;
  const std::string& s = *value;
  std::size_t used = 0;
  long long parsed = 0;
  try {
    parsed = std::stoll(s, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  RANKWISE_CHECK(
      !s.empty() && used == s.size(), ConfigError,
      "environment variable {}='{}' is not an integer; unset it or set it to a whole number", name,
      s);
  RANKWISE_CHECK(
      parsed >= min_value && parsed <= max_value, ConfigError,
      "environment variable {}={} is out of range [{}, {}]; fix the launcher configuration", name,
      s, min_value, max_value);
  return static_cast<int>(parsed);
}

struct Names {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  LaunchSource source;
};

constexpr Names kConventions[] = {
    {wire::kRankVariable, wire::kWorldSizeVariable, wire::kLocalRankVariable, wire::kLocalWorldSizeVariable,
     LaunchSource::kTorchrun},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", LaunchSource::kMpirun},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     LaunchSource::kSrun},
};

}  // namespace

LaunchEnv LaunchEnv::from_map(const Vars& vars) {
  LaunchEnv env;
  const Names* names = nullptr;
  for (const auto& candidate : kConventions) {
    if (lookup(vars, candidate.rank) || lookup(vars, candidate.world_size)) {
      names = &candidate;
      break;
    }
  }
  if (names != nullptr) {
    env.source = names->source;
    env.world_size = parse_int(vars, names->world_size, 1, 1);
    env.rank = parse_int(vars, names->rank, 0, 0);
    RANKWISE_CHECK(env.rank < env.world_size, ConfigError,
                   "{}={} must be smaller than {}={}; check the launcher's arguments", names->rank,
                   env.rank, names->world_size, env.world_size);
    env.local_world_size = parse_int(vars, names->local_world_size, env.world_size, 1);
    env.local_rank = parse_int(vars, names->local_rank, env.rank % env.local_world_size, 0);
    RANKWISE_CHECK(env.local_rank < env.local_world_size, ConfigError,
                   "{}={} must be smaller than {}={}", names->local_rank, env.local_rank,
                   names->local_world_size, env.local_world_size);
    env.node_rank = parse_int(vars, wire::kGroupRankVariable, env.rank / env.local_world_size, 0);
  }
  if (auto addr = lookup(vars, wire::kMasterAddrVariable)) {
    if (addr->empty()) {
      core::raise<ConfigError>(
          "environment variable MASTER_ADDR is empty; set it to the host of rank 0 (for example "
          "127.0.0.1)");
    }
    env.master_addr = *addr;
  }
  env.master_port = parse_int(vars, wire::kMasterPortVariable, 29500, 1, 65535);
  env.restart_count = parse_int(vars, wire::kRestartCountVariable,
                                parse_int(vars, wire::kTorchelasticRestartCountVariable, 0, 0), 0);
  auto agent = lookup(vars, wire::kAgentStoreVariable);
  auto elastic = lookup(vars, wire::kTorchelasticAgentStoreVariable);
  env.agent_store = (agent && *agent == "1") || (elastic && (*elastic == "True" || *elastic == "1"));
  const auto virtual_local_rank = lookup(vars, wire::kVirtualLocalRankVariable);
  env.virtual_local_rank = virtual_local_rank && *virtual_local_rank == "1";
  return env;
}

LaunchEnv LaunchEnv::from_environment() {
  Vars vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return from_map(vars);
}

std::optional<std::string> get_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

namespace core {
namespace {

std::mutex process_env_mutex;
std::optional<LaunchEnv> registered_env;

}  // namespace

LaunchEnv process_env() {
  {
    std::lock_guard<std::mutex> lock(process_env_mutex);
    if (registered_env) return *registered_env;
  }
  return LaunchEnv::from_environment();
}

void set_process_env(std::optional<LaunchEnv> env) {
  std::lock_guard<std::mutex> lock(process_env_mutex);
  registered_env = std::move(env);
}

At here() {
  const LaunchEnv env = process_env();
  return {env.rank, env.world_size};
}

std::string where(At at) { return fmt::format("rank {}/{}", at.rank, at.world_size); }

std::string unprefixed(std::string text) {
  if (text.compare(0, kMessagePrefix.size(), kMessagePrefix) == 0) text.erase(0, kMessagePrefix.size());
  return text;
}

std::string unprefixed(std::string text, At at) {
  const std::string rank = where(at) + ": ";
  for (bool stripped = true; stripped;) {
    const std::size_t before = text.size();
    text = unprefixed(std::move(text));
    if (text.compare(0, rank.size(), rank) == 0) text.erase(0, rank.size());
    stripped = text.size() != before;
  }
  return text;
}

}  // namespace core
}  // namespace rankwise
