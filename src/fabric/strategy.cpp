#include "fabric/strategy.h"

#include "core/check.h"
#include "fabric/ddp_strategy.h"
#include "fabric/fsdp_strategy.h"
#include "fabric/zero1_strategy.h"
#include "rankwise/amp/grad_scaler.h"
#include "rankwise/dist/process_group.h"
#include "util/text.h"

namespace rankwise {

std::string strategy_option_error(const std::string& value) {
  if (value == "ddp" || value == "fsdp" || value == "zero1") return "";
  return "'" + value + "' is not a strategy; use ddp, fsdp or zero1";
}

namespace fabric {

void Strategy::add_to(checkpoint::TrainingState& state) const {
  state.model = model_.module.get();
  state.optimizer = optimizer_;
}

bool Strategy::step_through(torch::optim::Optimizer& optimizer, amp::GradScaler* scaler) {
  if (scaler) return scaler->step(optimizer);  // collective: every rank skips alike
  optimizer.step();
  return true;
}

std::string reason_of(const std::exception& error) {
  return core::unprefixed(util::first_line(error), core::here());
}

std::unique_ptr<Strategy> make_strategy(const FabricOptions& options) {
  const std::string& name = options.strategy();
  if (const std::string error = strategy_option_error(name); !error.empty()) {
    core::raise<ConfigError>("FabricOptions::strategy: {}", error);
  }
  if (name == "zero1") return std::make_unique<Zero1Strategy>();
  if (name == "fsdp") return std::make_unique<FsdpStrategy>();
  return std::make_unique<DdpStrategy>();
}

}  // namespace fabric
}  // namespace rankwise
