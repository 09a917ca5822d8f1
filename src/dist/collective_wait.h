#pragma once
// How rankwise waits for a c10d collective and names its failure: from what
// rankwise knows (how long it waited, against the timeout it set), never
// from c10d's message text, which differs between libtorch versions.
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <string>

namespace rankwise::dist {

/// Starts a collective (`launch` returns c10d's Work for it) and waits for it
/// at most `timeout` (the one the collective was launched with). A failure
/// of the wait throws TimeoutError when it came once `timeout` had passed
/// since the launch (c10d's wait, or Gloo's own timeout, which starts at the
/// launch or later), PeerError when it came earlier (a peer exited or
/// crashed). Both say `where` (detail::where()), `operation` and the
/// timeout, then what `explain` returns (if given: which ranks held it up),
/// and quote c10d's text. An exception from `launch` itself (a bad argument)
/// passes through unchanged.
void run_collective(const std::string& where, const std::string& operation,
                    std::chrono::milliseconds timeout,
                    const std::function<c10::intrusive_ptr<c10d::Work>()>& launch,
                    const std::function<std::string()>& explain = {});

}  // namespace rankwise::dist
