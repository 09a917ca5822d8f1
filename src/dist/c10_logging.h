#pragma once
// What libtorch says while rankwise runs it (c10d's Reducer, Gloo, TCPStore):
// TORCH_WARN and glog lines, shown on stderr as one line each,
//   rankwise: warning from c10d (rank 1/2): <message in rankwise's terms>
// instead of glog's raw lines and its "Logging before InitGoogleLogging()".
#include <string>

namespace rankwise::dist {

/// Routes c10's messages as above, `where` ("rank r/W") naming this rank.
/// Once per process: initializes glog (Debian's libtorch logs through it)
/// unless the program already did, with no log files and a sink that writes
/// the lines above for every thread. Per call: makes the calling thread's
/// c10 warning handler write them too (c10 keeps one per thread; threads
/// without it reach the glog sink through c10's default handler).
void route_c10_messages(const std::string& where);

/// Makes the calling thread's c10 warning handler rankwise's, as
/// route_c10_messages() does, unless the program set one of its own on this
/// thread (cheap; called where a thread may reach c10d for the first time,
/// e.g. a DDP forward). Needed without glog (PyPI's libtorch 2.x): there a
/// thread's TORCH_WARNs reach stderr in c10's own format unless its
/// handler is rankwise's.
void route_this_thread_c10_warnings();

}  // namespace rankwise::dist
