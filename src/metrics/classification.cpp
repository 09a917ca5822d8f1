#include "rankwise/metrics/classification.h"
#include "util/text.h"

#include "metrics/common.h"

namespace rankwise::metrics {

namespace {

void check_options(const ClassificationOptions& options, const std::string& where) {
  if (options.num_classes() <= 0) {
    fail(where, fmt::format("num_classes must be > 0, got {}; pass the number of classes, e.g. "
                            "ClassificationOptions(10)",
                            options.num_classes()));
  }
}

bool is_integer(const torch::Tensor& t) {
  return !t.is_floating_point() && !t.is_complex() && t.scalar_type() != torch::kBool;
}

// Validated target [n] int64 (CPU), padding removed.
torch::Tensor check_labels(const torch::Tensor& labels, int64_t num_classes, const char* what,
                           const std::string& where) {
  if (!labels.defined()) fail(where, std::string(what) + " is an undefined tensor");
  if (labels.dim() != 1) {
    fail(where, std::string(what) + " must be 1-D [N] class labels, got shape " + shape_of(labels));
  }
  if (!is_integer(labels)) {
    fail(where, std::string(what) + " must hold integer class labels (e.g. int64), got dtype " +
                    dtype_of(labels) + "; convert with .to(torch::kLong)");
  }
  auto l = labels.detach().to(torch::kCPU, torch::kLong);
  if (l.numel() > 0) {
    const int64_t lo = l.min().item<int64_t>(), hi = l.max().item<int64_t>();
    if (lo < 0 || hi >= num_classes) {
      fail(where, fmt::format("{} holds label {}, outside [0, {}); labels must be class indices "
                              "0..num_classes-1 (check num_classes)",
                              std::string(what), lo < 0 ? lo : hi, num_classes));
    }
  }
  return l;
}

// Common validation of (preds, target); returns the kept rows: {preds, target}.
// preds is either float [n, C] scores or int64 [n] labels.
std::pair<torch::Tensor, torch::Tensor> check_inputs(const torch::Tensor& preds,
                                                     const torch::Tensor& target,
                                                     const PaddingMask& is_padding,
                                                     int64_t num_classes,
                                                     const std::string& where) {
  auto t = check_labels(target, num_classes, "target", where);
  if (!preds.defined()) fail(where, "preds is an undefined tensor");
  const int64_t n = t.size(0);
  torch::Tensor p;
  if (preds.dim() == 2) {
    if (!preds.is_floating_point()) {
      fail(where,
           "preds of shape [N, C] must be floating-point scores, got dtype " + dtype_of(preds));
    }
    if (preds.size(1) != num_classes) {
      fail(where,
           fmt::format("preds has shape {} but num_classes is {}; scores must be [N, num_classes]",
                       shape_of(preds), num_classes));
    }
    p = preds.detach().to(torch::kCPU);
  } else if (preds.dim() == 1) {
    p = check_labels(preds, num_classes, "preds", where);
  } else {
    fail(where, "preds must be scores [N, C] or labels [N], got shape " + shape_of(preds));
  }
  if (p.size(0) != n) {
    fail(where, fmt::format("preds has {} samples but target has {} (shapes {} and {})", p.size(0),
                            n, shape_of(preds), shape_of(target)));
  }
  if (!is_padding.empty()) {
    auto keep = is_padding.keep(n, where);
    p = p.index({keep});
    t = t.index({keep});
  }
  return {p, t};
}

torch::Tensor predicted_labels(const torch::Tensor& p) {
  return p.dim() == 2 ? p.argmax(1) : p;
}

}  // namespace

// ------------------------------------------------------------------ Accuracy
Accuracy::Accuracy(ClassificationOptions options) : Metric("Accuracy"), options_(options) {
  const std::string where = context(name(), "Accuracy");
  check_options(options_, where);
  if (options_.top_k() < 1 || options_.top_k() > options_.num_classes()) {
    fail(where, fmt::format("top_k must be in [1, num_classes = {}], got {}",
                            options_.num_classes(), options_.top_k()));
  }
  add_state("correct", torch::zeros({}, torch::kLong), Reduction::kSum);
  add_state("total", torch::zeros({}, torch::kLong), Reduction::kSum);
}

void Accuracy::update(const torch::Tensor& preds, const torch::Tensor& target,
                      const PaddingMask& is_padding) {
  const std::string where = context(name(), "update");
  auto [p, t] = check_inputs(preds, target, is_padding, options_.num_classes(), where);
  torch::Tensor correct;
  if (options_.top_k() == 1) {
    correct = predicted_labels(p).eq(t);
  } else {
    if (p.dim() != 2) {
      fail(where, fmt::format("top_k = {} needs scores [N, C], got labels of shape {}",
                              options_.top_k(), shape_of(preds)));
    }
    auto top = std::get<1>(p.topk(options_.top_k(), 1));  // [n, k]
    correct = top.eq(t.unsqueeze(1)).any(1);
  }
  state_tensor("correct").add_(correct.sum());
  state_tensor("total").add_(t.size(0));
}

torch::Tensor Accuracy::compute_from(const StateMap& states) const {
  return states.at("correct").to(torch::kDouble) / states.at("total").to(torch::kDouble);
}

// ------------------------------------------------------------------ ConfusionMatrix
ConfusionMatrix::ConfusionMatrix(ClassificationOptions options)
    : Metric("ConfusionMatrix"), options_(options) {
  check_options(options_, context(name(), "ConfusionMatrix"));
  const int64_t c = options_.num_classes();
  add_state("confmat", torch::zeros({c, c}, torch::kLong), Reduction::kSum);
}

void ConfusionMatrix::update(const torch::Tensor& preds, const torch::Tensor& target,
                             const PaddingMask& is_padding) {
  auto [p, t] = check_inputs(preds, target, is_padding, options_.num_classes(),
                             context(name(), "update"));
  const int64_t c = options_.num_classes();
  auto flat = t * c + predicted_labels(p);
  state_tensor("confmat").add_(torch::bincount(flat, {}, c * c).view({c, c}).to(torch::kLong));
}

torch::Tensor ConfusionMatrix::compute_from(const StateMap& states) const {
  return states.at("confmat").clone();
}

// ------------------------------------------------------------------ StatScores
StatScores::StatScores(std::string name, ClassificationOptions options)
    : Metric(std::move(name)), options_(options) {
  check_options(options_, context(this->name(), this->name()));
  const int64_t c = options_.num_classes();
  add_state("tp", torch::zeros({c}, torch::kLong), Reduction::kSum);
  add_state("fp", torch::zeros({c}, torch::kLong), Reduction::kSum);
  add_state("fn", torch::zeros({c}, torch::kLong), Reduction::kSum);
}

void StatScores::update(const torch::Tensor& preds, const torch::Tensor& target,
                        const PaddingMask& is_padding) {
  auto [p, t] = check_inputs(preds, target, is_padding, options_.num_classes(),
                             context(name(), "update"));
  const int64_t c = options_.num_classes();
  auto pred = predicted_labels(p);
  auto hit = pred.eq(t);
  auto tp = torch::bincount(t.index({hit}), {}, c);
  auto predicted = torch::bincount(pred, {}, c);
  auto actual = torch::bincount(t, {}, c);
  state_tensor("tp").add_(tp);
  state_tensor("fp").add_(predicted - tp);
  state_tensor("fn").add_(actual - tp);
}

torch::Tensor StatScores::average(const torch::Tensor& num, const torch::Tensor& den,
                                  const StateMap& states) const {
  auto n = num.to(torch::kDouble);
  auto d = den.to(torch::kDouble);
  switch (options_.average()) {
    case Average::kMicro: {
      const double total = d.sum().item<double>();
      return torch::full({}, total == 0 ? 0.0 : n.sum().item<double>() / total, torch::kDouble);
    }
    case Average::kNone:
      return torch::where(d.gt(0), n / d.clamp_min(1), torch::zeros_like(d));
    case Average::kMacro: {
      // Classes present in the targets or the predictions (sklearn's labels=None).
      auto present = (states.at("tp") + states.at("fp") + states.at("fn")).gt(0);
      auto per_class = torch::where(d.gt(0), n / d.clamp_min(1), torch::zeros_like(d));
      const int64_t count = present.sum().item<int64_t>();
      if (count == 0) return torch::zeros({}, torch::kDouble);
      return per_class.index({present}).sum() / static_cast<double>(count);
    }
  }
  return torch::Tensor();
}

Precision::Precision(ClassificationOptions options) : StatScores("Precision", options) {}
torch::Tensor Precision::compute_from(const StateMap& s) const {
  return average(s.at("tp"), s.at("tp") + s.at("fp"), s);
}

Recall::Recall(ClassificationOptions options) : StatScores("Recall", options) {}
torch::Tensor Recall::compute_from(const StateMap& s) const {
  return average(s.at("tp"), s.at("tp") + s.at("fn"), s);
}

F1::F1(ClassificationOptions options) : StatScores("F1", options) {}
torch::Tensor F1::compute_from(const StateMap& s) const {
  return average(2 * s.at("tp"), 2 * s.at("tp") + s.at("fp") + s.at("fn"), s);
}

}  // namespace rankwise::metrics
