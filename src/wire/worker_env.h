#pragma once
// The environment rankwise-run gives each worker (torchrun's names, and
// rankwise's own): set by launch/workers/worker_group.cpp, read by
// core/env.cpp and the worker's error and stack-dump paths.
#include <array>

#include "wire/error_file.h"
#include "wire/stack_dump_request.h"
#include "wire/store_keys.h"

namespace rankwise::wire {

constexpr const char* kRankVariable = "RANK";
constexpr const char* kLocalRankVariable = "LOCAL_RANK";
constexpr const char* kWorldSizeVariable = "WORLD_SIZE";
constexpr const char* kLocalWorldSizeVariable = "LOCAL_WORLD_SIZE";
constexpr const char* kGroupRankVariable = "GROUP_RANK";
constexpr const char* kGroupWorldSizeVariable = "GROUP_WORLD_SIZE";
constexpr const char* kRoleRankVariable = "ROLE_RANK";
constexpr const char* kRoleWorldSizeVariable = "ROLE_WORLD_SIZE";
constexpr const char* kRoleNameVariable = "ROLE_NAME";
constexpr const char* kMasterAddrVariable = "MASTER_ADDR";
constexpr const char* kMasterPortVariable = "MASTER_PORT";
constexpr const char* kRestartCountVariable = "RANKWISE_RESTART_COUNT";
constexpr const char* kTorchelasticRestartCountVariable = "TORCHELASTIC_RESTART_COUNT";
constexpr const char* kTorchelasticMaxRestartsVariable = "TORCHELASTIC_MAX_RESTARTS";
constexpr const char* kTorchelasticRunIdVariable = "TORCHELASTIC_RUN_ID";
constexpr const char* kAgentStoreVariable = "RANKWISE_AGENT_STORE";
constexpr const char* kTorchelasticAgentStoreVariable = "TORCHELASTIC_USE_AGENT_STORE";
constexpr const char* kVirtualLocalRankVariable = "RANKWISE_VIRTUAL_LOCAL_RANK";

/// Every variable the launcher sets for each worker: one of the launcher's
/// own environment with such a name is not passed on.
inline constexpr std::array<const char*, 20> kWorkerVariables = {
    kRankVariable, kLocalRankVariable, kWorldSizeVariable, kLocalWorldSizeVariable,
    kGroupRankVariable, kGroupWorldSizeVariable, kRoleRankVariable, kRoleWorldSizeVariable,
    kRoleNameVariable, kMasterAddrVariable, kMasterPortVariable, kRestartCountVariable,
    kTorchelasticRestartCountVariable, kTorchelasticMaxRestartsVariable, kTorchelasticRunIdVariable,
    kAgentStoreVariable, kTorchelasticAgentStoreVariable, kErrorFileVariable, kStackDumpFileVariable,
    kJobKeyVariable};

}  // namespace rankwise::wire
