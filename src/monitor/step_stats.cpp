#include "rankwise/monitor/step_stats.h"

#include "diag/step_counters.h"

namespace rankwise::monitor {

void record_step(int64_t samples, std::optional<double> loss) { diag::count_step(samples, loss); }

void set_device(const std::string& device) { diag::set_step_device(device); }

}  // namespace rankwise::monitor
