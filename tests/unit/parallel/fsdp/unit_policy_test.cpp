// Which submodules become units (src/parallel/fsdp/unit_policy.cpp) and how a
// parameter's rows are laid out (layout.cpp): torch.chunk's rule, checked by
// hand for sizes that do not divide, and smaller than, the world.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "parallel/fsdp/layout.h"
#include "parallel/fsdp/unit_policy.h"
#include "rankwise/error.h"

namespace {

namespace nn = torch::nn;
using rankwise::parallel::UnitPolicy;
using rankwise::parallel::fsdp::find_units;

struct BlockImpl : nn::Module {
  BlockImpl() : fc(register_module("fc", nn::Linear(4, 4))) {}
  nn::Linear fc;
};
TORCH_MODULE(Block);

// A head that uses the embedding's weight (tied weights).
struct TiedHeadImpl : nn::Module {
  explicit TiedHeadImpl(const torch::Tensor& w) : weight(register_parameter("weight", w)) {}
  torch::Tensor weight;
};
TORCH_MODULE(TiedHead);

struct NetImpl : nn::Module {
  NetImpl()
      : emb(register_module("emb", nn::Embedding(8, 4))),
        blocks(register_module("blocks", nn::ModuleList(Block(), Block()))),
        extra(register_module("extra", Block())),
        head(register_module("head", TiedHead(emb->weight))) {}
  nn::Embedding emb;
  nn::ModuleList blocks;
  Block extra;
  TiedHead head;
};
TORCH_MODULE(Net);

std::vector<std::string> names(const std::vector<rankwise::parallel::fsdp::UnitSpec>& units) {
  std::vector<std::string> out;
  for (const auto& u : units) out.push_back(u.name);
  return out;
}

TEST(FsdpUnitPolicy, DefaultIsEachChildOfTheOutermostSequentialOrModuleList) {
  nn::Sequential seq(nn::Linear(2, 3), nn::ReLU(), nn::Linear(3, 3), nn::Linear(3, 1));
  const auto units = find_units(*seq, UnitPolicy());
  EXPECT_EQ(names(units), (std::vector<std::string>{"0", "2", "3", ""}));  // ReLU holds nothing
  EXPECT_EQ(units[1].parameters, (std::vector<std::string>{"2.weight", "2.bias"}));
  EXPECT_TRUE(units.back().parameters.empty());

  Net net;
  const auto in_net = find_units(*net, UnitPolicy());
  EXPECT_EQ(names(in_net), (std::vector<std::string>{"blocks.0", "blocks.1", ""}));
  EXPECT_EQ(in_net.back().parameters,
            (std::vector<std::string>{"emb.weight", "extra.fc.weight", "extra.fc.bias"}));
}

TEST(FsdpUnitPolicy, ByTypeByNameAndBySize) {
  Net net;
  EXPECT_EQ(names(find_units(*net, UnitPolicy().of_type<BlockImpl>())),
            (std::vector<std::string>{"blocks.0", "blocks.1", "extra", ""}));
  // emb's weight is also the head's: tied weights go to the root unit, and
  // a unit left with no parameter is dropped.
  const auto named = find_units(*net, UnitPolicy().names({"extra", "emb"}));
  EXPECT_EQ(names(named), (std::vector<std::string>{"extra", ""}));
  EXPECT_EQ(named.back().parameters, (std::vector<std::string>{"emb.weight", "blocks.0.fc.weight",
                                                               "blocks.0.fc.bias", "blocks.1.fc.weight",
                                                               "blocks.1.fc.bias"}));
  // fc: 20 elements each (emb, 32, is tied to the root's head).
  EXPECT_EQ(names(find_units(*net, UnitPolicy().min_params(20))),
            (std::vector<std::string>{"blocks.0.fc", "blocks.1.fc", "extra.fc", ""}));
}

TEST(FsdpUnitPolicy, APolicyThatMatchesNothingIsAConfigError) {
  Net net;
  EXPECT_THROW(find_units(*net, UnitPolicy().of_type<nn::GRUImpl>()), rankwise::ConfigError);
  EXPECT_THROW(find_units(*net, UnitPolicy().names({"blocks.7"})), rankwise::ConfigError);
  EXPECT_THROW(find_units(*net, UnitPolicy().min_params(1000000)), rankwise::ConfigError);
}

TEST(FsdpLayout, RowsFollowTorchChunk) {
  using rankwise::parallel::fsdp::ParamShard;
  // torch.chunk(torch.arange(10), 4): sizes 3, 3, 3, 1; of 3 rows over 4: 1, 1, 1, 0.
  ParamShard p;
  p.shape = {10, 2};
  rankwise::parallel::fsdp::lay_out(p, 4);
  EXPECT_EQ(p.chunk, 3);
  EXPECT_EQ(p.row_numel, 2);
  EXPECT_EQ(std::vector<int64_t>({p.rows_of(0), p.rows_of(1), p.rows_of(2), p.rows_of(3)}),
            std::vector<int64_t>({3, 3, 3, 1}));
  ParamShard q;
  q.shape = {3};
  rankwise::parallel::fsdp::lay_out(q, 4);
  EXPECT_EQ(std::vector<int64_t>({q.rows_of(0), q.rows_of(1), q.rows_of(2), q.rows_of(3)}),
            std::vector<int64_t>({1, 1, 1, 0}));
  // torch.chunk(torch.arange(5), 4) gives 2, 2, 1 and no fourth piece.
  ParamShard r;
  r.shape = {5};
  rankwise::parallel::fsdp::lay_out(r, 4);
  EXPECT_EQ(std::vector<int64_t>({r.rows_of(0), r.rows_of(1), r.rows_of(2), r.rows_of(3)}),
            std::vector<int64_t>({2, 2, 1, 0}));
}

TEST(FsdpLayout, PackedGradientsAndGatheredRowsRoundTrip) {
  using rankwise::parallel::fsdp::ParamShard;
  ParamShard a, b;
  a.shape = {5, 2};
  b.shape = {3};
  for (ParamShard* p : {&a, &b}) rankwise::parallel::fsdp::lay_out(*p, 2);
  std::vector<ParamShard*> params{&a, &b};
  const int64_t per_rank = rankwise::parallel::fsdp::assign_offsets(params);
  EXPECT_EQ(per_rank, 3 * 2 + 2);
  const auto ga = torch::arange(10, torch::kFloat).view({5, 2});
  const auto gb = torch::arange(3, torch::kFloat) + 100;
  auto input = torch::empty({2 * per_rank});
  rankwise::parallel::fsdp::pack_gradients(params, {ga, gb}, input, per_rank, 2, 1.0);
  // rank 0: a's rows 0-2, b's rows 0-1; rank 1: a's rows 3-4 and a padded row, b's row 2 and padding.
  EXPECT_TRUE(torch::equal(input, torch::tensor({0., 1., 2., 3., 4., 5., 100., 101., 6., 7., 8., 9., 0., 0., 102., 0.}, torch::kFloat)));
  std::vector<at::Tensor> full{torch::zeros({5, 2}), torch::zeros({3})};
  rankwise::parallel::fsdp::unpack_gathered(params, input, per_rank, 2, full);
  EXPECT_TRUE(torch::equal(full[0], ga));
  EXPECT_TRUE(torch::equal(full[1], gb));
}

}  // namespace
