#include "launch/workers/worker_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "launch/workers/attempt_runner.h"
#include "launch/workers/summary.h"
#include "util/text.h"
#include "util/visible_devices.h"
#include "launch/output/output_merger.h"
#include "launch/output/say.h"
#include "wire/error_file.h"
#include "wire/preemption.h"
#include "wire/stack_dump_request.h"
#include "wire/store_keys.h"
#include "wire/worker_env.h"

namespace rankwise::launch::workers {

std::string worker_error_file(const AttemptConfig& c, int rank) {
  const std::string& log_dir = c.options->log_dir;
  if (!log_dir.empty()) return kept_error_file(log_dir, c.attempt, rank);
  return fmt::format("{}/error_attempt{}_rank{}.json", c.error_dir, c.attempt, rank);
}

std::string worker_stack_dump_file(const AttemptConfig& c, int rank) {
  return fmt::format("{}/stacks_attempt{}_rank{}.txt", c.error_dir, c.attempt, rank);
}

void set_environment_variable(std::vector<std::string>& env, const std::string& name,
                              const std::string& value) {
  env.erase(std::remove_if(env.begin(), env.end(),
                           [&](const std::string& v) { return v.rfind(name + "=", 0) == 0; }),
            env.end());
  env.push_back(fmt::format("{}={}", name, value));
}

// --virtual-local-rank (torchrun's meaning): LOCAL_RANK 0, and only this
// worker's GPU visible: the launcher's CUDA_VISIBLE_DEVICES entry for its
// local rank, or the GPU of that index.
void set_virtual_local_rank(std::vector<std::string>& env, int local_rank) {
  const std::string kName = "CUDA_VISIBLE_DEVICES=";
  std::optional<std::vector<std::string>> visible;  // trimmed entries, as checked at parse
  for (const std::string& v : env) {
    if (v.rfind(kName, 0) == 0) visible = util::parse_visible_devices(v.substr(kName.size()));
  }
  const auto index = static_cast<std::size_t>(local_rank);
  set_environment_variable(env, wire::kLocalRankVariable, "0");
  set_environment_variable(env, "CUDA_VISIBLE_DEVICES",
                           !visible                    ? std::to_string(local_rank)
                           : index < visible->size()   ? (*visible)[index]
                                                       : std::string("-1"));
  set_environment_variable(env, wire::kVirtualLocalRankVariable, "1");
}

std::vector<std::string> worker_environment(const AttemptConfig& c, int local_rank) {
  const LaunchOptions& o = *c.options;
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  std::vector<std::string> env = c.base_env;
  auto set = [&](const char* name, const auto& value) {
    env.push_back(fmt::format("{}={}", name, value));
  };
  set(wire::kRankVariable, rank);
  set(wire::kLocalRankVariable, local_rank);
  set(wire::kWorldSizeVariable, o.world_size());
  set(wire::kLocalWorldSizeVariable, o.nproc_per_node);
  set(wire::kGroupRankVariable, o.node_rank);
  set(wire::kGroupWorldSizeVariable, o.nnodes);
  set(wire::kRoleRankVariable, rank);
  set(wire::kRoleWorldSizeVariable, o.world_size());
  set(wire::kRoleNameVariable, o.role);
  set(wire::kMasterAddrVariable, o.master_addr);
  set(wire::kMasterPortVariable, c.master_port);
  set(wire::kRestartCountVariable, c.attempt);
  set(wire::kTorchelasticRestartCountVariable, c.attempt);
  set(wire::kTorchelasticMaxRestartsVariable, o.max_restarts);
  set(wire::kTorchelasticRunIdVariable, o.run_id);
  set(wire::kAgentStoreVariable, "1");
  set(wire::kTorchelasticAgentStoreVariable, "True");
  set(wire::kErrorFileVariable, worker_error_file(c, rank));
  set(wire::kStackDumpFileVariable, worker_stack_dump_file(c, rank));
  if (!c.job_key.empty()) set(wire::kJobKeyVariable, c.job_key);
  if (o.virtual_local_rank) set_virtual_local_rank(env, local_rank);
  // A flag wins over the same variable in the launcher's own environment.
  if (!o.iface.empty()) set_environment_variable(env, "GLOO_SOCKET_IFNAME", o.iface);
  // With --log-dir, a collective that fails dumps its rank's flight recorder
  // beside the logs (unless the user chose a directory already).
  const bool user_dir = std::any_of(env.begin(), env.end(), [](const std::string& v) {
    return v.rfind("RANKWISE_FLIGHT_RECORDER_DIR=", 0) == 0;
  });
  if (!o.log_dir.empty() && !user_dir) {
    set("RANKWISE_FLIGHT_RECORDER_DIR",
        fmt::format("{}/attempt_{}/flight_recorder", o.log_dir, c.attempt));
  }
  return env;
}

AttemptResult run_attempt(const AttemptConfig& config) { return AttemptRunner(config).run(); }

AttemptConfig attempt_config(const LaunchOptions& o, int master_port, std::string host,
                             std::string error_dir, std::vector<std::string> base_env,
                             std::string job_key) {
  AttemptConfig config;
  config.options = &o;
  config.master_port = master_port;
  config.host = std::move(host);
  config.error_dir = std::move(error_dir);
  config.base_env = std::move(base_env);
  config.hang_check = (o.hang_timeout.count() > 0 || o.deadlock_timeout.count() > 0) && o.world_size() > 1;
  config.job_key = std::move(job_key);
  return config;
}

int signaled_exit_code(const AttemptResult& result) {
  if (result.preempted) {
    output::say(fmt::format("preempted: every worker saved a checkpoint and exited {} after {}; "
                            "exit code {} (run the job again with --resume to go on)",
                            wire::kPreemptedExitCode, signal_name(result.signal),
                            wire::kPreemptedExitCode));
    return wire::kPreemptedExitCode;
  }
  if (result.failure) output::write_all(2, format_failure_summary(*result.failure));
  output::say(fmt::format("stopped every worker after {}; exit code {}", signal_name(result.signal),
                          128 + result.signal));
  return 128 + result.signal;
}

}  // namespace rankwise::launch::workers
