#pragma once
/// \file error.h
/// The exceptions rankwise throws. Every message names the rank and world
/// size, the operation, the path/key/timeout involved, and what to do.

#include <stdexcept>
#include <string>

namespace rankwise {

/// Base of every rankwise exception.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A collective, barrier or store wait did not complete within its timeout.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// Processes could not meet at the rendezvous store: a worker at
/// MASTER_ADDR:MASTER_PORT, or rankwise-run's nodes (the store could not be
/// hosted or reached, or a node never arrived).
class RendezvousError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint could not be written or read back intact.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// A peer rank exited, crashed or closed its connection while this rank
/// waited for it in a collective (c10d's "Connection closed by peer"). Usually
/// a secondary error: the first error is in that peer's output, and
/// rankwise-run's failure summary ranks it below other errors (see
/// rankwise::is_peer_gone in run_main.h).
class PeerError : public Error {
 public:
  using Error::Error;
};

/// Ranks called different collectives, or the same one with different shapes.
class CollectiveMismatchError : public Error {
 public:
  using Error::Error;
};

/// Bad configuration: an environment variable, option or flag is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace rankwise
