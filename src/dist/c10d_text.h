#pragma once
// c10d's messages (errors and warnings of the Reducer) are written for
// Python users: they name keyword arguments (`find_unused_parameters=True`),
// `_set_static_graph()`, `torch.nn.parallel.DistributedDataParallel` and the
// TORCH_DISTRIBUTED_DEBUG variable, which rankwise's DDP does not read.
#include <chrono>
#include <exception>
#include <string>

namespace rankwise::dist {

/// c10d's text with its Python-only advice in rankwise's C++ terms
/// (`DistributedDataParallelOptions().find_unused_parameters(true)`, ...),
/// its TORCH_DISTRIBUTED_DEBUG and bug-report advice dropped, and on one
/// line. Text that names none of these is returned unchanged but for the
/// line breaks.
std::string in_rankwise_terms(const std::string& c10d_text);

/// Why a rendezvous failed, from c10d's or Gloo's `text`: another rank closed
/// its connection (it exited or was killed), not every rank arrived within
/// `timeout`, or "" when the text says neither.
std::string rendezvous_failure_cause(const std::string& text, std::chrono::milliseconds timeout);

/// An exception's message; for c10::Error without its C++ stack trace.
std::string message_of(const std::exception& e);

}  // namespace rankwise::dist
