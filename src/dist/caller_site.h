#pragma once
// The line a collective is reported at (dist::CallerSite, process_group.h):
// a public entry point's caller; else, for a collective issued inside
// rankwise (DDP's step, the progress reduction, FSDP's gathers) while a
// Fabric training loop runs, the loop's `for` line; else the collective's own.
#include <optional>
#include <source_location>

namespace rankwise::dist {

/// Sets (or with nullopt clears) the running training loop's line on this
/// thread. Local.
void set_loop_site(const std::optional<std::source_location>& site);

}  // namespace rankwise::dist
