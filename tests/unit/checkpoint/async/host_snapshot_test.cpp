// async::HostSnapshot: the copy an asynchronous save writes from is the state
// as it was at the call, keeps the tensors' layout and shared storages, and
// reuses its buffers from one save to the next.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/async/host_snapshot.h"

using rankwise::checkpoint::async::HostSnapshot;

namespace {

c10::impl::GenericDict state_of(const torch::Tensor& weight, const torch::Tensor& steps) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("weight", weight);
  dict.insert("weight_t", weight.t());  // a view sharing weight's storage
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(steps);
  list.push_back(int64_t{7});
  dict.insert("nested", list);
  return dict;
}

}  // namespace

TEST(HostSnapshot, TheCopyIsTheStateAtTheCallWithItsLayoutAndSharing) {
  auto weight = torch::arange(12, torch::kFloat32).reshape({3, 4}).requires_grad_(true);
  auto steps = torch::tensor({5}, torch::kInt64);
  HostSnapshot snapshot;
  const auto copy = snapshot.take(state_of(weight, steps)).toGenericDict();
  {
    torch::NoGradGuard no_grad;
    weight.mul_(-1);  // training goes on, in place
    steps.add_(1);
  }
  const auto w = copy.at("weight").toTensor();
  const auto wt = copy.at("weight_t").toTensor();
  EXPECT_TRUE(torch::equal(w, torch::arange(12, torch::kFloat32).reshape({3, 4})));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(wt.strides(), weight.t().strides());
  EXPECT_TRUE(wt.storage().is_alias_of(w.storage())) << "a shared storage is copied once";
  EXPECT_NE(w.data_ptr(), weight.data_ptr());
  const auto nested = copy.at("nested").toList();
  EXPECT_EQ(nested.get(0).toTensor().item<int64_t>(), 5);
  EXPECT_EQ(nested.get(1).toInt(), 7);
  EXPECT_EQ(snapshot.bytes(), 12 * 4 + 8);
}

TEST(HostSnapshot, BuffersAreReusedWhileTheStorageSizesStay) {
  auto weight = torch::randn({64, 64});
  auto steps = torch::tensor({1}, torch::kInt64);
  HostSnapshot snapshot;
  const void* first = nullptr;
  for (int i = 0; i < 5; ++i) {
    weight.add_(1);
    const auto copy = snapshot.take(state_of(weight, steps)).toGenericDict();
    if (i == 0) first = copy.at("weight").toTensor().data_ptr();
    EXPECT_EQ(copy.at("weight").toTensor().data_ptr(), first) << "save " << i;
    EXPECT_TRUE(torch::equal(copy.at("weight").toTensor(), weight));
  }
  EXPECT_EQ(snapshot.allocations(), 2);  // weight's storage and steps'
  // A storage of another size gets a new buffer; the others are kept.
  snapshot.take(state_of(torch::randn({8, 8}), steps));
  EXPECT_EQ(snapshot.allocations(), 3);
}

TEST(HostSnapshot, UndefinedAndConjugatedTensorsAreKeptOrCloned) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("missing", torch::Tensor());
  auto complex = torch::randn({4}, torch::kComplexFloat);
  dict.insert("conj", complex.conj());
  HostSnapshot snapshot;
  const auto copy = snapshot.take(dict).toGenericDict();
  EXPECT_FALSE(copy.at("missing").toTensor().defined());
  EXPECT_TRUE(torch::equal(copy.at("conj").toTensor(), complex.conj()));
  complex.mul_(2);
  EXPECT_FALSE(torch::equal(copy.at("conj").toTensor(), complex.conj()));
}

// What a sharded asynchronous save copies: each chunk's own elements (a few
// rows of a large tensor copy those rows), contiguous, in reused buffers.
TEST(HostSnapshot, TakeEachCopiesOnlyEachTensorsElementsIntoReusedBuffers) {
  auto global = torch::arange(1000, torch::kFloat32).reshape({100, 10});
  auto rows = global.narrow(0, 20, 5);  // a view of 50 of the 1000 elements
  auto transposed = torch::arange(6, torch::kFloat64).reshape({2, 3}).t();  // not contiguous
  HostSnapshot snapshot;
  const void* first = nullptr;
  for (int i = 0; i < 3; ++i) {
    const auto copies = snapshot.take_each({rows, transposed, torch::Tensor()});
    ASSERT_EQ(copies.size(), 3u);
    EXPECT_TRUE(torch::equal(copies[0], global.narrow(0, 20, 5)));
    EXPECT_TRUE(copies[0].is_contiguous());
    EXPECT_TRUE(torch::equal(copies[1], transposed));
    EXPECT_TRUE(copies[1].is_contiguous());
    EXPECT_EQ(copies[1].dtype(), torch::kFloat64);
    EXPECT_FALSE(copies[2].defined());
    if (i == 0) first = copies[0].data_ptr();
    EXPECT_EQ(copies[0].data_ptr(), first) << "save " << i;
    global.add_(1);  // training goes on: the copy keeps the values at the call
    EXPECT_FALSE(torch::equal(copies[0], global.narrow(0, 20, 5)));
  }
  EXPECT_EQ(snapshot.bytes(), 50 * 4 + 6 * 8);
  EXPECT_EQ(snapshot.allocations(), 2);
}
