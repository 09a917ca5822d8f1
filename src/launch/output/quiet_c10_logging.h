#pragma once
/// \file quiet_c10_logging.h
/// The launcher's own store clients (rendezvous, polls, heartbeats) fail on
/// purpose-free occasions: a node that is gone, a store not yet up, a retry.
/// libtorch logs each such failure (glog with Debian's 1.13: "E1203 ...
/// socket.cpp:860] [c10d] The client socket has timed out ..."; c10's logger
/// with PyPI's 2.x), which buries the launcher's own message that names the
/// node. So the launcher silences libtorch's logging in its own process; its
/// workers keep theirs.

namespace rankwise::launch::output {

/// Turns off libtorch's log lines (below fatal) in this process: glog with
/// no log files and nothing on stderr where libtorch logs through glog,
/// and c10's FLAGS_caffe2_log_level (which c10d's own logging also reads)
/// raised to fatal. Call once, first thing in main.
void silence_libtorch_logging();

}  // namespace rankwise::launch::output
