#pragma once
// What a fatal check of Gloo's means. Gloo checks, on its transport's own
// thread, that what a peer sends fits the buffer this rank posted; when it
// does not (the ranks passed tensors of different sizes to the same
// collective, which the collective check, RANKWISE_DEBUG=detail, would have
// named first), it throws where nothing catches it, and the process aborts
// with only "[enforce fail at pair.cc:510] op.preamble.length <= op.nbytes.
// 1024 vs 12". The handler installed here says, before that abort, what it
// means and in which collective (from the flight recorder), on stderr and in
// the error file (rankwise::record_error), so that rankwise-run's summary
// shows it.
#include <memory>
#include <string>

#include "core/check.h"

namespace rankwise::diag {
class FlightRecorder;
struct CollectiveRecord;
}

namespace rankwise::dist {

/// The message for an uncaught exception whose text is `what` on rank `at`,
/// when it is a fatal check of Gloo's or c10's ("[enforce fail at ..."),
/// naming `last`, this rank's last collective (null when none), with advice
/// by whether it was checked ahead; "" for any other text. Pure.
std::string explain_gloo_abort(const std::string& what, const diag::CollectiveRecord* last, core::At at);

/// Installs a std::terminate handler that, for an exception explained by
/// explain_gloo_abort, prints the message as run_main does for an uncaught
/// exception and records it in the error file, then calls the handler it
/// replaced (which aborts). Installed once per process; the latest
/// `recorder` (held weakly) names the collective. Any rank.
void install_gloo_abort_report(std::shared_ptr<const diag::FlightRecorder> recorder, core::At at);

}  // namespace rankwise::dist
