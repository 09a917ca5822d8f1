#pragma once
/// \file torchrun_compat.h
/// torchrun's flags that have no rankwise meaning (torch 2.15's
/// torch/distributed/run.py): those accepted without effect (--no-python,
/// --start-method, --event-log-handler null, --signals-to-handle naming
/// signals rankwise-run forwards anyway) and those refused with what to use
/// instead (-m, --run-path, --numa-binding, ...). docs/launcher.md
/// lists every torchrun flag; the ones rankwise supports live in flags.cpp.

#include <functional>

namespace CLI {
class App;
}

namespace rankwise::launch::cli {

/// Adds those flags to `app` (hidden from -h, each also with underscores).
/// Returns the check to call once `app` has parsed: it throws UsageError for
/// the first refused flag given, naming it and what to use instead, and for a
/// no-op flag's value that would mean something rankwise-run does not do.
std::function<void()> add_torchrun_only_flags(CLI::App& app);

/// Makes every option of `app` that torchrun also has read torchrun's
/// environment default when the command line does not give it: PET_<DEST>,
/// DEST being torchrun's argparse name in capitals (PET_NPROC_PER_NODE,
/// PET_RDZV_ENDPOINT; flags such as PET_STANDALONE take 1 or 0), and
/// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE for --log-line-prefix-template. A
/// value on the command line wins. Call after adding the options, before
/// parsing.
void read_torchrun_environment_defaults(CLI::App& app);

}  // namespace rankwise::launch::cli
