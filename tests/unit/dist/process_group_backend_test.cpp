// InitOptions::backend: what is refused, before any rendezvous (no network).
#include <gtest/gtest.h>

#include <string>

#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace {

std::string config_error_of(const rankwise::dist::InitOptions& options) {
  rankwise::LaunchEnv env;
  // More processes on this node than any machine has GPUs: no rank has a GPU
  // of its own, so "nccl" is refused on every build and machine.
  env.local_world_size = 4096;
  env.world_size = 4096;
  env.master_port = 1;  // never reached: the check comes before the rendezvous
  try {
    rankwise::dist::ProcessGroup group(env, options);
  } catch (const rankwise::ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

}  // namespace

TEST(BackendChoice, NcclWithoutAGpuPerRankSaysWhatToUse) {
  const std::string message = config_error_of(rankwise::dist::InitOptions().backend("nccl"));
  EXPECT_NE(message.find("rank 0/4096"), std::string::npos) << message;
  EXPECT_NE(message.find("InitOptions().backend(\"nccl\")"), std::string::npos) << message;
  // Why: no NCCL in this build, or no GPU of this rank's own.
  EXPECT_TRUE(message.find("has no NCCL") != std::string::npos ||
              message.find("LOCAL_WORLD_SIZE=4096") != std::string::npos)
      << message;
  EXPECT_NE(message.find("use \"gloo\""), std::string::npos) << message;
}

TEST(BackendChoice, UnknownBackendIsRefused) {
  const std::string message = config_error_of(rankwise::dist::InitOptions().backend("mpi"));
  EXPECT_NE(message.find("unknown backend 'mpi'"), std::string::npos) << message;
  EXPECT_NE(message.find("\"auto\", \"gloo\" or \"nccl\""), std::string::npos) << message;
}
