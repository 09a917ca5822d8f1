#include "rankwise/checkpoint/optimizer_state.h"

#include "core/check.h"

#include <fmt/ranges.h>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

#include "checkpoint/io/note.h"
#include "compat/optimizer_state_key.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;
using Dict = c10::impl::GenericDict;
using Betas = std::tuple<double, double>;

// A TORCH_ARG field, through its mutable getter (`T& name() noexcept`).
template <class T, class Owner>
using Field = T& (Owner::*)() noexcept;

// A per-parameter state tensor; `needed` says whether the group's options
// call for it (null: always), so a state that lacks it is refused at load.
template <class Options, class State>
struct TensorField {
  const char* key;
  Field<torch::Tensor, State> field;
  bool (*needed)(const Options&) = nullptr;
};

// What a libtorch optimizer type stores, under PyTorch's key names.
template <class Options, class State>
struct Spec {
  std::vector<std::pair<const char*, Field<double, Options>>> doubles;
  std::vector<std::pair<const char*, Field<bool, Options>>> bools;
  Field<Betas, Options> betas = nullptr;
  std::vector<TensorField<Options, State>> tensors;
  Field<int64_t, State> step = nullptr;
  // PyTorch 2.x writes 'decoupled_weight_decay' in Adam's (false) and
  // AdamW's (true) param_groups (AdamW is Adam with it set); the value that
  // matches this type's update: true only for AdamW.
  bool decoupled_weight_decay = false;
};

// The type-erased codec of one optimizer type.
struct Codec {
  std::string name;
  std::function<bool(const Optimizer&)> matches;
  std::function<bool(const OptimizerOptions&)> takes_options;  // options of this optimizer's type
  std::function<void(const OptimizerOptions&, Dict&)> write_options;
  std::function<void(OptimizerOptions&, const Dict&, const std::string& where)> read_options;
  std::function<void(const OptimizerParamState&, Dict&)> write_state;
  // Null for an empty state (a parameter that has not been stepped yet).
  std::function<std::unique_ptr<OptimizerParamState>(
      const Dict&, const OptimizerOptions&, const torch::Tensor& param, const std::string& where)>
      read_state;
};

Dict new_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

[[noreturn]] void missing(const char* key, const std::string& where) {
  core::raise<CheckpointError>(
      "optimizer state {} has no '{}': was it written by another optimizer type, or with other "
      "options?",
      where, key);
}

const c10::IValue& require(const Dict& dict, const char* key, const std::string& where) {
  auto it = dict.find(key);
  if (it == dict.end()) missing(key, where);
  return it->value();
}

double to_double(const c10::IValue& v, const char* key, const std::string& where) {
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isTensor() && v.toTensor().numel() == 1) return v.toTensor().item<double>();
  core::raise<CheckpointError>("optimizer state {}: '{}' is a {}, expected a number", where, key,
                               v.tagKind());
}

bool to_bool(const c10::IValue& v, const char* key, const std::string& where) {
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt() != 0;
  core::raise<CheckpointError>("optimizer state {}: '{}' is a {}, expected a bool", where, key,
                               v.tagKind());
}

// "step" as Python writes it: a 0-dim float32 tensor, float64 where float32
// would round (past 2^24), so a resume stays exact.
torch::Tensor step_tensor(int64_t step) {
  const bool exact_in_float = std::llabs(step) <= (int64_t{1} << 24);
  return torch::tensor(static_cast<double>(step), exact_in_float ? torch::kFloat32 : torch::kFloat64)
      .reshape({});
}

int64_t to_step(const c10::IValue& v, const std::string& where) {
  const double value = to_double(v, "step", where);
  if (value < 0 || value != std::floor(value)) {
    core::raise<CheckpointError>("optimizer state {}: 'step' is {}, expected a whole number >= 0",
                                 where, value);
  }
  return static_cast<int64_t>(value);
}

// Python's load_state_dict casts floating-point state to the parameter's
// dtype and everything to its device; a copy, so the checkpoint stays apart.
torch::Tensor state_tensor(const c10::IValue& v, const char* key, const torch::Tensor& param,
                           const std::string& where) {
  if (!v.isTensor()) {
    core::raise<CheckpointError>("optimizer state {}: '{}' is a {}, expected a tensor", where, key,
                                 v.tagKind());
  }
  const auto& t = v.toTensor();
  if (t.sizes() != param.sizes()) {
    core::raise<CheckpointError>(
        "optimizer state {}: '{}' has shape [{}] but the parameter has [{}]. Was the state written "
        "for another model?",
        where, key, fmt::join(t.sizes(), ", "), fmt::join(param.sizes(), ", "));
  }
  auto options = param.options();
  if (!t.is_floating_point()) options = options.dtype(t.scalar_type());
  return t.to(options, /*non_blocking=*/false, /*copy=*/true).detach();
}

template <class Options, class State>
void write_options(const Spec<Options, State>& spec, const OptimizerOptions& base, Dict& group) {
  auto& o = const_cast<Options&>(dynamic_cast<const Options&>(base));
  for (const auto& [key, field] : spec.doubles) group.insert(key, (o.*field)());
  if (spec.betas) {
    const auto& b = (o.*spec.betas)();
    group.insert("betas", c10::ivalue::Tuple::create({std::get<0>(b), std::get<1>(b)}));
  }
  for (const auto& [key, field] : spec.bools) group.insert(key, (o.*field)());
  group.insert("maximize", false);
}

// Refuses the update flags PyTorch writes that this optimizer does not do: 'maximize': true,
// and 'decoupled_weight_decay' other than this type's (`decoupled`: AdamW's).
void check_update_flags(const Dict& group, const std::string& where, bool decoupled) {
  auto maximize = group.find("maximize");
  if (maximize != group.end() && to_bool(maximize->value(), "maximize", where)) {
    core::raise<CheckpointError>(
        "optimizer state {} sets 'maximize': true, which libtorch's optimizer does not support; "
        "continue this run in Python, or save it without it",
        where);
  }
  auto found = group.find("decoupled_weight_decay");
  if (found != group.end() && to_bool(found->value(), "decoupled_weight_decay", where) != decoupled) {
    core::raise<CheckpointError>(
        "optimizer state {} sets 'decoupled_weight_decay': {}", where,
        (decoupled ? "false (Adam's update), but this optimizer is AdamW; load it into "
                     "torch::optim::Adam"
                   : "true (AdamW's update), which this optimizer does not do; load it into "
                     "torch::optim::AdamW, or continue this run in Python"));
  }
}

template <class Options, class State>
void read_options(const Spec<Options, State>& spec, OptimizerOptions& base, const Dict& group,
                  const std::string& where) {
  auto& o = dynamic_cast<Options&>(base);
  for (const auto& [key, field] : spec.doubles) {
    (o.*field)() = to_double(require(group, key, where), key, where);
  }
  if (spec.betas) {
    const auto& v = require(group, "betas", where);
    const auto elements = v.isTuple() ? v.toTupleRef().elements().vec()
                                      : (v.isList() ? v.toListRef().vec() : std::vector<c10::IValue>{});
    if (elements.size() != 2) {
      core::raise<CheckpointError>("optimizer state {}: 'betas' must be a pair of numbers", where);
    }
    (o.*spec.betas)() = Betas(to_double(elements[0], "betas", where), to_double(elements[1], "betas", where));
  }
  for (const auto& [key, field] : spec.bools) {
    (o.*field)() = to_bool(require(group, key, where), key, where);
  }
  check_update_flags(group, where, spec.decoupled_weight_decay);
}

template <class Options, class State>
void write_state(const Spec<Options, State>& spec, const OptimizerParamState& base, Dict& out) {
  auto& s = const_cast<State&>(dynamic_cast<const State&>(base));
  if (spec.step) out.insert("step", step_tensor((s.*spec.step)()));
  for (const auto& t : spec.tensors) {
    const auto& value = (s.*t.field)();
    if (value.defined()) out.insert(t.key, value);
  }
}

template <class Options, class State>
std::unique_ptr<OptimizerParamState> read_state(const Spec<Options, State>& spec, const Dict& in,
                                                const OptimizerOptions& base, const torch::Tensor& param,
                                                const std::string& where) {
  if (in.empty()) return nullptr;
  const auto& options = dynamic_cast<const Options&>(base);
  auto s = std::make_unique<State>();
  if (spec.step) (s.get()->*spec.step)() = to_step(require(in, "step", where), where);
  bool any = spec.step != nullptr;
  for (const auto& t : spec.tensors) {
    auto it = in.find(t.key);
    // Python's SGD records "momentum_buffer": None when momentum is 0.
    if (it == in.end() || it->value().isNone()) {
      if (t.needed == nullptr || t.needed(options)) missing(t.key, where);
      continue;
    }
    (s.get()->*t.field)() = state_tensor(it->value(), t.key, param, where);
    any = true;
  }
  if (!any) return nullptr;
  return s;
}

template <class Opt, class Options, class State>
Codec make_codec(std::string name, Spec<Options, State> spec) {
  Codec c;
  c.name = std::move(name);
  c.matches = [](const Optimizer& o) { return dynamic_cast<const Opt*>(&o) != nullptr; };
  c.takes_options = [](const OptimizerOptions& o) { return dynamic_cast<const Options*>(&o) != nullptr; };
  c.write_options = [spec](const OptimizerOptions& base, Dict& group) { write_options(spec, base, group); };
  c.read_options = [spec](OptimizerOptions& base, const Dict& group, const std::string& where) {
    read_options(spec, base, group, where);
  };
  c.write_state = [spec](const OptimizerParamState& base, Dict& out) { write_state(spec, base, out); };
  c.read_state = [spec](const Dict& in, const OptimizerOptions& base, const torch::Tensor& param,
                        const std::string& where) { return read_state(spec, in, base, param, where); };
  return c;
}

// Adam and AdamW are separate libtorch types with the same fields; AdamW is
// the one whose weight decay is decoupled (PyTorch 2.x names this in each
// param_group).
template <class Opt, class Options, class State>
Codec adam_codec(std::string name, bool decoupled_weight_decay) {
  return make_codec<Opt>(
      std::move(name),
      Spec<Options, State>{{{"lr", &Options::lr},
                            {"eps", &Options::eps},
                            {"weight_decay", &Options::weight_decay}},
                           {{"amsgrad", &Options::amsgrad}},
                           &Options::betas,
                           {{"exp_avg", &State::exp_avg},
                            {"exp_avg_sq", &State::exp_avg_sq},
                            {"max_exp_avg_sq", &State::max_exp_avg_sq,
                             [](const Options& o) { return o.amsgrad(); }}},
                           &State::step,
                           decoupled_weight_decay});
}

const std::vector<Codec>& codecs() {
  using namespace torch::optim;
  static const std::vector<Codec> all = [] {
    std::vector<Codec> v;
    v.push_back(make_codec<SGD>(
        "SGD", Spec<SGDOptions, SGDParamState>{
                   {{"lr", &SGDOptions::lr},
                    {"momentum", &SGDOptions::momentum},
                    {"dampening", &SGDOptions::dampening},
                    {"weight_decay", &SGDOptions::weight_decay}},
                   {{"nesterov", &SGDOptions::nesterov}},
                   nullptr,
                   {{"momentum_buffer", &SGDParamState::momentum_buffer,
                     [](const SGDOptions& o) { return o.momentum() != 0; }}},
                   nullptr}));
    v.push_back(adam_codec<Adam, AdamOptions, AdamParamState>("Adam", false));
    v.push_back(adam_codec<AdamW, AdamWOptions, AdamWParamState>("AdamW", true));
    v.push_back(make_codec<RMSprop>(
        "RMSprop", Spec<RMSpropOptions, RMSpropParamState>{
                       {{"lr", &RMSpropOptions::lr},
                        {"alpha", &RMSpropOptions::alpha},
                        {"eps", &RMSpropOptions::eps},
                        {"weight_decay", &RMSpropOptions::weight_decay},
                        {"momentum", &RMSpropOptions::momentum}},
                       {{"centered", &RMSpropOptions::centered}},
                       nullptr,
                       {{"square_avg", &RMSpropParamState::square_avg},
                        {"momentum_buffer", &RMSpropParamState::momentum_buffer,
                         [](const RMSpropOptions& o) { return o.momentum() > 0; }},
                        {"grad_avg", &RMSpropParamState::grad_avg,
                         [](const RMSpropOptions& o) { return o.centered(); }}},
                       &RMSpropParamState::step}));
    v.push_back(make_codec<Adagrad>(
        "Adagrad", Spec<AdagradOptions, AdagradParamState>{
                       {{"lr", &AdagradOptions::lr},
                        {"lr_decay", &AdagradOptions::lr_decay},
                        {"weight_decay", &AdagradOptions::weight_decay},
                        {"initial_accumulator_value", &AdagradOptions::initial_accumulator_value},
                        {"eps", &AdagradOptions::eps}},
                       {},
                       nullptr,
                       {{"sum", &AdagradParamState::sum}},
                       &AdagradParamState::step}));
    return v;
  }();
  return all;
}

const Codec& codec_of(const Optimizer& optimizer) {
  for (const auto& c : codecs()) {
    if (c.matches(optimizer)) return c;
  }
  const bool lbfgs = dynamic_cast<const torch::optim::LBFGS*>(&optimizer) != nullptr;
  core::raise<CheckpointError>(
      "cannot save or restore the state of {}; supported: SGD, Adam, AdamW, RMSprop, Adagrad. Keep "
      "what your optimizer needs in TrainingState::extras instead",
      (lbfgs ? "LBFGS (its state is a history of the last updates, with no counterpart in "
               "PyTorch's state_dict layout that libtorch can restore)"
             : "this optimizer type"));
}

std::string group_where(std::size_t g) { return fmt::format("param_groups[{}]", g); }

// The codec of `optimizer`, whose groups must hold options of its own type:
// libtorch takes a group of any options type and static_casts them at each
// step (e.g. AdamWOptions in a torch::optim::Adam).
const Codec& checked_codec_of(const Optimizer& optimizer) {
  const Codec& codec = codec_of(optimizer);
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!codec.takes_options(groups[g].options())) {
      core::raise<CheckpointError>(
          "{} of this torch::optim::{} holds the options of another optimizer type (e.g. "
          "AdamWOptions in a torch::optim::Adam), which libtorch misreads at every step; build "
          "every group with torch::optim::{}Options",
          group_where(g), codec.name, codec.name);
    }
  }
  return codec;
}

void load_legacy_archive(Optimizer& optimizer, const torch::Tensor& bytes) {
  if (bytes.scalar_type() != torch::kUInt8 || bytes.dim() != 1) {
    core::raise<CheckpointError>(
        "the optimizer entry is a tensor but not the 1-D uint8 archive of rankwise's older format");
  }
  auto contiguous = bytes.contiguous();
  std::istringstream in(std::string(reinterpret_cast<const char*>(contiguous.data_ptr<uint8_t>()),
                                    static_cast<std::size_t>(contiguous.numel())));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    core::raise<CheckpointError>("optimizer state does not fit this optimizer: {}",
                                 e.what_without_backtrace());
  }
  io::note(
      core::message("note: this checkpoint's optimizer entry is in rankwise's older format "
                    "(libtorch's archive): per-parameter state was restored, but learning rates "
                    "and other options keep the values this optimizer was built with. Checkpoints "
                    "saved from now on use PyTorch's state_dict layout and restore them too"));
}

}  // namespace

std::string optimizer_type_name(const Optimizer& optimizer) { return codec_of(optimizer).name; }

c10::IValue optimizer_state_dict(const Optimizer& optimizer) {
  const Codec& codec = checked_codec_of(optimizer);
  const auto& state = optimizer.state();
  auto per_param = Dict(c10::IntType::get(), c10::AnyType::get());
  c10::List<c10::IValue> groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    auto out = new_dict();
    codec.write_options(group.options(), out);
    c10::List<int64_t> params;
    for (const auto& param : group.params()) {
      auto it = state.find(compat::optimizer_state_key(state, param));
      if (it != state.end() && it->second) {
        auto entry = new_dict();
        codec.write_state(*it->second, entry);
        per_param.insert(index, entry);
      }
      params.push_back(index++);
    }
    out.insert("params", params);
    groups.push_back(out);
  }
  auto result = new_dict();
  result.insert("state", per_param);
  result.insert("param_groups", groups);
  return result;
}

void load_optimizer_state_dict(Optimizer& optimizer, const c10::IValue& state_dict) {
  if (state_dict.isTensor()) return load_legacy_archive(optimizer, state_dict.toTensor());
  const Codec& codec = checked_codec_of(optimizer);
  if (!state_dict.isGenericDict()) {
    core::raise<CheckpointError>(
        "an optimizer state_dict must be a dict with 'state' and 'param_groups', got a {}",
        state_dict.tagKind());
  }
  const auto top = state_dict.toGenericDict();
  const auto& saved_groups_value = require(top, "param_groups", "");
  const auto& saved_state_value = require(top, "state", "");
  if (!saved_groups_value.isList() || !saved_state_value.isGenericDict()) {
    core::raise<CheckpointError>(
        "optimizer state_dict: 'param_groups' must be a list and 'state' a dict");
  }
  const auto saved_groups = saved_groups_value.toListRef();
  auto& groups = optimizer.param_groups();
  if (saved_groups.size() != groups.size()) {
    core::raise<CheckpointError>(
        "the optimizer state has {} param_groups, this {} has {}; build the optimizer with the "
        "same parameter groups, in the same order, as the run that saved it",
        saved_groups.size(), codec.name, groups.size());
  }
  // Validate everything before changing anything, so a bad file leaves the
  // optimizer as it was.
  std::vector<std::unique_ptr<OptimizerOptions>> new_options;
  std::vector<std::pair<torch::Tensor, std::unique_ptr<OptimizerParamState>>> new_state;
  const auto saved_state = saved_state_value.toGenericDict();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string where = group_where(g);
    if (!saved_groups[g].isGenericDict()) {
      core::raise<CheckpointError>("optimizer state {} is not a dict", where);
    }
    const auto saved = saved_groups[g].toGenericDict();
    const auto& params_value = require(saved, "params", where);
    if (!params_value.isList()) {
      core::raise<CheckpointError>("optimizer state {}: 'params' is not a list", where);
    }
    const auto indices = params_value.toListRef();
    const auto& params = groups[g].params();
    if (indices.size() != params.size()) {
      core::raise<CheckpointError>(
          "optimizer state {} has {} parameters, this optimizer's has {}. Was it written for "
          "another model or another grouping?",
          where, indices.size(), params.size());
    }
    auto options = groups[g].options().clone();
    codec.read_options(*options, saved, where);
    new_options.push_back(std::move(options));
    for (std::size_t p = 0; p < params.size(); ++p) {
      auto it = saved_state.find(indices[p]);
      if (it == saved_state.end()) continue;
      const std::string param_where =
          fmt::format("state[{}] ({}, parameter {})",
                      indices[p].isInt() ? fmt::format("{}", indices[p].toInt()) : std::string("?"), where, p);
      if (!it->value().isGenericDict()) {
        core::raise<CheckpointError>("optimizer state {} is not a dict", param_where);
      }
      new_state.emplace_back(params[p], codec.read_state(it->value().toGenericDict(),
                                                         *new_options.back(), params[p], param_where));
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].set_options(std::move(new_options[g]));
  auto& state = optimizer.state();
  state.clear();
  for (auto& [param, param_state] : new_state) {
    if (param_state) state[compat::optimizer_state_key(state, param)] = std::move(param_state);
  }
}

}  // namespace rankwise::checkpoint
