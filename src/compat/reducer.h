#pragma once
// c10d::Reducer's constructor, which changed between the libtorch versions
// rankwise supports; the one found at compile time is used:
//   1.13: (params, bucket_indices, per_bucket_size_limits, process_group,
//          expect_sparse_gradients, bucket_bytes_cap, find_unused_parameters,
//          gradient_as_bucket_view, param_names, first_bucket_bytes_cap)
//   2.x (2.15): per_bucket_size_limits gone; after first_bucket_bytes_cap
//          skip_all_reduce_unused_params, use_python_reducer and
//          bucket_bytes_cap_list (the limits used when buckets are rebuilt;
//          empty: the Reducer's own, from the two caps), then defaulted flags.
// Used only by src/parallel/ddp/ddp.cpp, which includes reducer.hpp (see missing/).
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace rankwise::compat {

/// What rankwise's DistributedDataParallel gives the Reducer.
struct ReducerArgs {
  std::vector<at::Tensor> params;
  std::vector<std::vector<size_t>> bucket_indices;
  std::vector<size_t> per_bucket_size_limits;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  std::vector<bool> expect_sparse_gradients;
  int64_t bucket_bytes_cap = 0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  std::unordered_map<size_t, std::string> param_names;
  int64_t first_bucket_bytes_cap = 0;
};

template <class>
inline constexpr bool kUnknownReducer = false;

/// A c10d::Reducer built from `a` with the constructor this libtorch has.
/// (A template only so that the constructor not taken is never compiled.)
template <class Reducer = c10d::Reducer>
std::shared_ptr<Reducer> make_reducer(ReducerArgs a) {
  using Tensors = std::vector<at::Tensor>;
  using Indices = std::vector<std::vector<size_t>>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Names = std::unordered_map<size_t, std::string>;
  if constexpr (std::is_constructible_v<Reducer, Tensors, Indices, std::vector<size_t>, Group,
                                        std::vector<bool>, int64_t, bool, bool, Names, int64_t>) {
    return std::make_shared<Reducer>(
        std::move(a.params), std::move(a.bucket_indices), std::move(a.per_bucket_size_limits),
        std::move(a.process_group), std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
        a.find_unused_parameters, a.gradient_as_bucket_view, std::move(a.param_names),
        a.first_bucket_bytes_cap);
  } else if constexpr (std::is_constructible_v<Reducer, Tensors, Indices, Group, std::vector<bool>,
                                               int64_t, bool, bool, Names, int64_t, bool, bool,
                                               std::vector<int64_t>>) {
    // As PyTorch's DDP passes them when no per-bucket caps are given:
    // every parameter all_reduced, the C++ Reducer, its own rebuild limits.
    return std::make_shared<Reducer>(
        std::move(a.params), std::move(a.bucket_indices), std::move(a.process_group),
        std::move(a.expect_sparse_gradients), a.bucket_bytes_cap, a.find_unused_parameters,
        a.gradient_as_bucket_view, std::move(a.param_names), a.first_bucket_bytes_cap,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  } else {
    static_assert(kUnknownReducer<Reducer>,
                  "this libtorch's c10d::Reducer constructor is not one rankwise knows; "
                  "add it to src/detail/compat/reducer.h");
  }
}

}  // namespace rankwise::compat
