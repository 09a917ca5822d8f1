#pragma once
// Every rank's c10::IValue (any picklable value: dicts of tensors, strings,
// numbers), gathered to every rank as pickled bytes over all_gather_varlen.
#include <ATen/core/ivalue.h>

namespace rankwise::dist {

/// Rank r's `local` at index r, on every rank: two all_gathers (the pickles'
/// lengths, then the padded bytes). Without a process group, or with one
/// rank, just `local`. Collective: every rank, same order.
c10::List<c10::IValue> all_gather_ivalues(const c10::IValue& local);

}  // namespace rankwise::dist
