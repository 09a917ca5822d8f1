#pragma once
// Fabric(argc, argv)'s command line: the Fabric's flags (rankwise/fabric/cli.h)
// taken out of argv, the rest left to the program in order; a misspelt
// Fabric flag is a ConfigError naming the flag meant (docs/fabric.md).
#include <optional>

#include "rankwise/fabric.h"

namespace rankwise::fabric {

// `defaults` with the flags of argv applied; argc/argv keep argv[0] and
// what the Fabric does not take. nullopt with --help (rank 0 printed the
// Fabric's flags). Throws ConfigError on a bad value or a misspelt flag.
std::optional<FabricOptions> parse_command_line(int& argc, char** argv, FabricOptions defaults);

}  // namespace rankwise::fabric
