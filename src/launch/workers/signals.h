#pragma once
/// \file signals.h
/// The launcher's signal handling: a self-pipe that turns SIGCHLD, SIGINT,
/// SIGTERM, SIGHUP and SIGQUIT into bytes its poll() loop reads.

#include <vector>

namespace rankwise::launch::workers {

/// Installs the handlers (once) and ignores SIGPIPE. Workers get default
/// dispositions back when they start (see spawn_worker).
void install_signal_pipe();

/// Read end of the self-pipe, for poll(); readable when a signal arrived.
int signal_pipe_fd();

/// Signals received since the last call, in order of arrival (SIGCHLD included).
std::vector<int> drain_signals();

/// Drains the signals as above; the first one other than SIGCHLD (one that
/// asks the launcher to stop), or 0 when none came.
int drain_stop_signal();

}  // namespace rankwise::launch::workers
