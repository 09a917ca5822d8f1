#pragma once
// Byte ranges of data files that a rank does not see, sent to it by ranks
// that do: for load_sharded_collective() on node-local disks (or a stale
// network filesystem). Over the process group's own collectives (an
// all_gather of the requests, then broadcasts from each serving rank): no
// transport of our own.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/sharded/reader.h"

namespace rankwise::checkpoint::sharded {

/// What exchange_ranges() needs to know about the data files.
struct ExchangeFiles {
  /// Files this rank reads itself (its view is the checkpoint rank 0 reads, and the file is there).
  std::vector<std::string> holds;
  /// Files of rank 0's checkpoint that this rank sees shorter than `.metadata` says, with the
  /// length it sees and the length needed (named when no rank holds them whole).
  struct Short {
    std::string file;
    int64_t size = 0;
    int64_t needed = 0;
  };
  std::vector<Short> short_files;
  /// Reads a range of a file this rank holds (throws CheckpointError).
  std::function<std::string(const ByteRange&)> read;
  /// Where a file was written ("on host a, by rank 2"), for errors.
  std::function<std::string(const std::string& file)> written_where;
};

/// Every rank: `wanted` (ranges of files it does not hold) and `error` (this
/// rank's failure so far, "" if none). Each wanted range is served by one
/// rank that holds its file (chosen the same way on every rank, spread over
/// the holders), which reads it and broadcasts it, in windows of at most
/// 64 MiB. Returns the wanted ranges with their bytes, unverified: the caller
/// checks them against the manifest's CRC-32s. Throws CheckpointError on
/// every rank when any rank passed an error (naming the ranks and their
/// errors), when no rank holds a wanted file (naming it and where it was
/// written), or when a serving rank could not read a range. With `announce`,
/// rank 0 prints one note naming the ranks that received bytes, how many
/// and from whom.
/// `what` names the operation in messages. Collective: every rank, same order.
std::vector<std::pair<ByteRange, std::string>> exchange_ranges(const std::vector<ByteRange>& wanted,
                                                               const std::string& error,
                                                               const ExchangeFiles& files,
                                                               const std::string& what, bool announce);

/// Every rank's `error` ("" for none), gathered; throws CheckpointError on
/// every rank when any is not empty, naming the ranks. Collective.
void raise_any(const std::string& error, const std::string& what);

}  // namespace rankwise::checkpoint::sharded
