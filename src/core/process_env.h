#pragma once
// Which process of the job this is, for the layers below dist/ (messages,
// logging, device choice): the LaunchEnv the default process group was made
// with, registered by dist::init() and cleared by dist::shutdown().
#include <optional>

#include "rankwise/env.h"

namespace rankwise::core {

/// The registered LaunchEnv, else LaunchEnv::from_environment() (which
/// throws ConfigError for a malformed environment). Any thread.
LaunchEnv process_env();

/// Registers `env` (dist::init) or clears it (nullopt: dist::shutdown).
void set_process_env(std::optional<LaunchEnv> env);

}  // namespace rankwise::core
