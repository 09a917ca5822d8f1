// Each collective is declared three times: on dist::ProcessGroup (the one
// implementation), as a dist:: shorthand for the global group and on the
// Fabric (both forward to it). Each static_cast below compiles only while
// that declaration has exactly these parameters, so the three cannot drift.
#include <gtest/gtest.h>

#include <chrono>
#include <source_location>
#include <string>
#include <vector>

#include "rankwise/dist/process_group.h"
#include "rankwise/fabric.h"

namespace {

using rankwise::Fabric;
using rankwise::dist::ProcessGroup;
using rankwise::dist::ReduceOp;
using Site = std::source_location;
using Ms = std::chrono::milliseconds;

// Compiles only when `declaration` (a static_cast to one signature) names a function.
template <auto declaration>
constexpr bool kDeclared = true;

// The same parameters, as a member of ProcessGroup, a free function and a member of Fabric.
#define RANKWISE_SAME_COLLECTIVE(name, Ret, ...)                                               \
  static_assert(kDeclared<static_cast<Ret (ProcessGroup::*)(__VA_ARGS__)>(&ProcessGroup::name)>); \
  static_assert(kDeclared<static_cast<Ret (*)(__VA_ARGS__)>(&rankwise::dist::name)>);             \
  static_assert(kDeclared<static_cast<Ret (Fabric::*)(__VA_ARGS__)>(&Fabric::name)>)

RANKWISE_SAME_COLLECTIVE(all_reduce, void, torch::Tensor&, ReduceOp, Site);
RANKWISE_SAME_COLLECTIVE(broadcast, void, torch::Tensor&, int, Site);
RANKWISE_SAME_COLLECTIVE(all_gather, std::vector<torch::Tensor>, const torch::Tensor&, Site);
RANKWISE_SAME_COLLECTIVE(barrier, void, Site);
RANKWISE_SAME_COLLECTIVE(monitored_barrier, void, const std::string&, Ms, bool, Site);

#undef RANKWISE_SAME_COLLECTIVE

}  // namespace

TEST(CollectiveSignatures, ProcessGroupShorthandsAndFabricTakeTheSameParameters) {
  // The checks are the static_asserts above; this records that they compiled.
  SUCCEED();
}
