#pragma once
// An all_gather of pieces whose length differs between ranks (pickled bytes,
// the rows of a kCat metric state), on the fixed-size all_gather that Gloo
// has: one all_gather of the lengths, then one of the pieces padded to the
// longest, trimmed on arrival.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "rankwise/dist/process_group.h"

namespace rankwise::dist {

/// Collectives an all_gather_varlen() issued.
struct VarlenGatherStats {
  int64_t all_gathers = 0;  ///< all_gather calls (1 or 2)
  int64_t elements = 0;     ///< elements this rank sent, both calls together
};

/// Every rank's pieces, in rank order: result[r][j] is rank r's piece j, 1-D
/// of `dtype` with that rank's own length (a view into the received buffer).
/// This rank has k = lengths.size() >= 1 pieces, piece j of lengths[j]
/// elements; `piece(j)` returns it (1-D, `dtype`) and is called, in order of
/// j, only after the lengths arrived. Two all_gathers: the lengths (int64
/// [k]), then, unless every piece of every rank is empty, one buffer holding
/// piece j padded with zeros to the longest piece j of any rank, the pieces
/// back to back. Returns an empty vector when there was nothing to gather
/// (every piece empty: only the lengths travelled). Adds what it issued to
/// `stats` when given. Collective: every rank, same order, same k and dtype.
std::vector<std::vector<torch::Tensor>> all_gather_varlen(
    ProcessGroup& group, const std::vector<int64_t>& lengths, torch::ScalarType dtype,
    const std::function<torch::Tensor(std::size_t)>& piece, VarlenGatherStats* stats = nullptr);

}  // namespace rankwise::dist
