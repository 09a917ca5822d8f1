#include <gtest/gtest.h>

#include "rankwise/env.h"
#include "rankwise/error.h"

using rankwise::ConfigError;
using rankwise::LaunchEnv;
using rankwise::LaunchSource;

TEST(LaunchEnv, AbsentMeansSingleProcess) {
  auto env = LaunchEnv::from_map({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.source, LaunchSource::kNone);
  EXPECT_FALSE(env.agent_store);
}

TEST(LaunchEnv, TorchrunVariables) {
  auto env = LaunchEnv::from_map({{"RANK", "3"},
                                  {"WORLD_SIZE", "4"},
                                  {"LOCAL_RANK", "1"},
                                  {"LOCAL_WORLD_SIZE", "2"},
                                  {"GROUP_RANK", "1"},
                                  {"MASTER_ADDR", "10.1.2.3"},
                                  {"MASTER_PORT", "1234"},
                                  {"TORCHELASTIC_RESTART_COUNT", "2"},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "10.1.2.3");
  EXPECT_EQ(env.master_port, 1234);
  EXPECT_EQ(env.restart_count, 2);
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.source, LaunchSource::kTorchrun);
}

TEST(LaunchEnv, VirtualLocalRankComesFromTheLauncher) {
  EXPECT_FALSE(LaunchEnv::from_map({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).virtual_local_rank);
  EXPECT_TRUE(LaunchEnv::from_map({{"RANK", "0"}, {"WORLD_SIZE", "1"},
                                   {"RANKWISE_VIRTUAL_LOCAL_RANK", "1"}})
                  .virtual_local_rank);
}

TEST(LaunchEnv, MpirunAndSrunVariables) {
  auto mpi = LaunchEnv::from_map({{"OMPI_COMM_WORLD_RANK", "5"},
                                  {"OMPI_COMM_WORLD_SIZE", "8"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(mpi.source, LaunchSource::kMpirun);
  EXPECT_EQ(mpi.rank, 5);
  EXPECT_EQ(mpi.world_size, 8);
  EXPECT_EQ(mpi.local_rank, 1);
  EXPECT_EQ(mpi.node_rank, 1);
  auto slurm = LaunchEnv::from_map(
      {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"},
       {"SLURM_NTASKS_PER_NODE", "1"}});
  EXPECT_EQ(slurm.source, LaunchSource::kSrun);
  EXPECT_EQ(slurm.rank, 2);
  EXPECT_EQ(slurm.world_size, 3);
  EXPECT_EQ(slurm.node_rank, 2);
}

TEST(LaunchEnv, NonNumericNamesVariableAndValue) {
  try {
    LaunchEnv::from_map({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='one'"), std::string::npos) << e.what();
  }
}

TEST(LaunchEnv, RankNotBelowWorldSize) {
  try {
    LaunchEnv::from_map({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK=2 must be smaller than WORLD_SIZE=2"),
              std::string::npos)
        << e.what();
  }
}

TEST(LaunchEnv, PortOutOfRange) {
  for (const char* port : {"0", "65536", "-1", "80x"}) {
    try {
      LaunchEnv::from_map({{"MASTER_PORT", port}});
      FAIL() << "expected ConfigError for " << port;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("MASTER_PORT"), std::string::npos) << e.what();
    }
  }
}

TEST(LaunchEnv, EmptyMasterAddr) {
  EXPECT_THROW(LaunchEnv::from_map({{"MASTER_ADDR", ""}}), ConfigError);
}
