// rankwise-ckpt's commands (checkpoint/tool/ckpt_tool.h): inspect, verify,
// convert and diff, on a CheckpointSource (checkpoint/safetensors/).
#include "checkpoint/tool/ckpt_tool.h"

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/pickle/torch_save_pickle.h"
#include "checkpoint/safetensors/checkpoint_source.h"
#include "checkpoint/safetensors/safetensors_file.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "checkpoint/torch_save/damage.h"
#include "checkpoint/torch_save/dtype_names.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/safetensors.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::tool {

namespace fs = std::filesystem;
using rankwise::checkpoint::safetensors::CheckpointSource;
using rankwise::checkpoint::safetensors::SourceEntry;

namespace {

// The command could not run: one line, exit 2.
struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws BadInput unless `path` looks like a checkpoint: a directory with a
// DCP `.metadata`, or a file that starts as a zip (torch.save's format).
void require_checkpoint(const std::string& path) {
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw BadInput(fmt::format("rankwise-ckpt: '{}' does not exist; give a checkpoint file (a .pt that rankwise "
                               "or torch.save wrote) or a sharded checkpoint directory (one with .metadata)", path));
  }
  if (fs::is_directory(status)) {
    if (!fs::exists(fs::path(path) / ".metadata")) {
      std::ifstream latest(fs::path(path) / "latest");
      std::string name;
      if (latest && std::getline(latest, name) && !name.empty()) {
        throw BadInput(fmt::format("rankwise-ckpt: '{}' is a checkpoint manager's directory; give one of "
                                   "its checkpoints, e.g. its latest, '{}'", path, (fs::path(path) / name).string()));
      }
      throw BadInput(fmt::format("rankwise-ckpt: '{}' is a directory without .metadata, not a sharded checkpoint; "
                                 "give the directory save_sharded() wrote (e.g. ckpts/checkpoint-0000000200)", path));
    }
    return;
  }
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, sizeof magic);
  // A file that ends with rankwise's checksum record is a damaged checkpoint,
  // for the reader to name, not some other file.
  if ((in.gcount() != 4 || std::memcmp(magic, "PK\x03\x04", 4) != 0) &&
      torch_save::checksum_record_size(path) == 0) {
    if (!safetensors::read_file_header(path).is_null()) {
      throw BadInput(fmt::format("rankwise-ckpt: '{}' is a safetensors file: `rankwise-ckpt inspect` lists it; "
                                 "verify, diff and convert read torch.save files and sharded directories", path));
    }
    throw BadInput(fmt::format("rankwise-ckpt: '{}' is not a checkpoint (not a torch.save zip file); give a file "
                               "written by rankwise::checkpoint::save() or Python's torch.save", path));
  }
}

// Opens a checkpoint for a command whose failure to open it is bad input.
std::unique_ptr<CheckpointSource> open_source(const std::string& path) {
  require_checkpoint(path);
  try {
    return std::make_unique<CheckpointSource>(path, "rankwise-ckpt");
  } catch (const rankwise::CheckpointError& e) {
    throw BadInput(e.what());
  }
}

std::string dtype_text(c10::ScalarType type) {
  const auto* names = rankwise::checkpoint::torch_save::dtype_names(type);
  return names ? names->dtype : c10::toString(type);
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// ---- inspect ---------------------------------------------------------------

void print_run_identity(CheckpointSource& source, std::ostream& out) {
  std::map<std::string, const SourceEntry*> by_key;
  for (const auto& e : source.entries()) by_key[e.key] = &e;
  auto it = by_key.find("format");
  if (it == by_key.end() || it->second->is_tensor) return;
  const auto format = source.value(*it->second);
  if (!format.isString() || format.toStringRef().rfind("rankwise.training_state", 0) != 0) return;
  std::string line = "training state: format " + format.toStringRef();
  for (const char* key : {"step", "epoch", "position", "world_size", "optimizer_type"}) {
    auto k = by_key.find(key);
    if (k != by_key.end() && !k->second->is_tensor) {
      line += fmt::format(", {} {}", key, rankwise::checkpoint::safetensors::describe_value(source.value(*k->second)));
    }
  }
  out << line << "\n";
}

// A safetensors file (what `convert --to safetensors` writes): its tensors
// from the header, in the header's order.
int inspect_safetensors(const std::string& path, const nlohmann::json& header, std::ostream& out) {
  int64_t tensors = 0, bytes = 0;
  std::string lines;
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__" || !entry.is_object()) continue;
    const auto offsets = entry.value("data_offsets", std::vector<int64_t>{0, 0});
    const int64_t size = offsets.size() == 2 ? offsets[1] - offsets[0] : 0;
    ++tensors;
    bytes += size;
    lines += fmt::format("  {}  {}  {}  {} bytes\n", key, entry.value("dtype", std::string("?")),
                         shape_text(entry.value("shape", std::vector<int64_t>{})), size);
  }
  out << fmt::format("{}: safetensors file, no checksums (the format records none)\n", path);
  if (header.contains("__metadata__")) out << "metadata: " << header["__metadata__"].dump() << "\n";
  out << fmt::format("entries: {} tensors ({} bytes)\n", tensors, bytes) << lines;
  return kGood;
}

int inspect(const std::string& path, std::ostream& out) {
  if (fs::is_regular_file(path)) {
    if (const auto header = safetensors::read_file_header(path); !header.is_null()) return inspect_safetensors(path, header, out);
  }
  auto source = open_source(path);
  out << fmt::format("{}: {} checkpoint, {}\n", path,
                           source->sharded() ? "sharded (DCP directory)" : "replicated (torch.save file)",
                           source->has_checksums() ? "CRC-32s recorded" : "no checksums (written by Python)");
  out << "files:\n";
  for (const auto& file : source->files()) {
    const fs::path full = source->sharded() ? fs::path(path) / file : fs::path(file);
    std::error_code error;
    const auto size = fs::file_size(full, error);
    out << fmt::format("  {}  {}\n", file, error ? std::string("missing") : fmt::format("{} bytes", size));
  }
  print_run_identity(*source, out);
  int64_t tensors = 0, bytes = 0, others = 0;
  for (const auto& e : source->entries()) {
    tensors += e.is_tensor;
    others += !e.is_tensor;
    bytes += e.bytes();
  }
  out << fmt::format("entries: {} tensors ({} bytes), {} other values\n", tensors, bytes, others);
  for (const auto& e : source->entries()) {
    if (e.is_tensor) {
      out << fmt::format("  {}  {}  {}  {} bytes{}\n", e.key, dtype_text(e.dtype), shape_text(e.shape), e.bytes(),
                               source->sharded() ? fmt::format("  {} chunks", e.stored_chunks) : "");
    } else {
      out << fmt::format("  {}  = {}\n", e.key, rankwise::checkpoint::safetensors::describe_value(source->value(e)));
    }
  }
  return kGood;
}

// ---- verify ----------------------------------------------------------------

// A torch.save file: its whole-file CRC-32; when that fails, which entries
// (and keys) changed, one FAILED line each.
int verify_file(const std::string& path, std::ostream& out) {
  try {
    if (!rankwise::checkpoint::verify(path)) {
      out << fmt::format("UNVERIFIED: {}: the file records no checksum (Python's torch.save writes none); "
                         "nothing to verify\n", path);
      return kFound;
    }
  } catch (const rankwise::CheckpointError& error) {
    out << "FAILED: " << error.what() << "\n";
    for (const auto& where : torch_save::locate_damage(path)) out << "FAILED: " << path << ": " << where << "\n";
    return kFound;
  }
  out << fmt::format("OK: {}: the CRC-32 of the whole file matches\n", path);
  return kGood;
}

int verify(const std::string& path, std::ostream& out) {
  require_checkpoint(path);
  try {
    if (!fs::is_directory(path)) return verify_file(path, out);
    CheckpointSource source(path, "rankwise-ckpt verify");
    if (!source.has_checksums()) {
      out << fmt::format("UNVERIFIED: {}: no .rankwise-manifest.json (Python's dcp.save records no checksums); "
                               "nothing to verify\n", path);
      return kFound;
    }
    const auto failures = source.verify_entries();
    for (const auto& failure : failures) out << "FAILED: " << failure << "\n";
    if (!failures.empty()) {
      out << fmt::format("{}: {} of {} entries damaged\n", path, failures.size(), source.entries().size());
      return kFound;
    }
    out << fmt::format("OK: {}: .metadata and {} entries in {} data files match the manifest's CRC-32s\n", path,
                             source.entries().size(), source.files().size() - 2);
    return kGood;
  } catch (const rankwise::CheckpointError& error) {
    out << "FAILED: " << error.what() << "\n";
    return kFound;
  }
}

// ---- convert ---------------------------------------------------------------

struct ConvertOptions {
  std::string to;
  std::string src, dst;
  int64_t max_shard_bytes = 0;
  std::string prefix;
};

int convert_to_safetensors(const ConvertOptions& o, std::ostream& out) {
  require_checkpoint(o.src);
  const auto result = rankwise::checkpoint::export_safetensors(
      o.src, o.dst, rankwise::checkpoint::SafetensorsExportOptions().max_shard_bytes(o.max_shard_bytes).prefix(o.prefix));
  out << fmt::format("wrote {} tensors ({} bytes) to {}\n", result.tensors.size(), result.total_bytes,
                           fmt::join(result.files, ", "));
  if (!result.skipped.empty()) {
    out << fmt::format("skipped {} values that are not tensors: {}\n", result.skipped.size(),
                             fmt::join(result.skipped, ", "));
  }
  return kGood;
}

// SRC's entries whose keys start with `prefix` (all for ""), keyed without
// it; BadInput when there is none.
std::vector<std::pair<std::string, const SourceEntry*>> entries_under(
    const CheckpointSource& source, const ConvertOptions& o) {
  std::vector<std::pair<std::string, const SourceEntry*>> kept;
  for (const auto& e : source.entries()) {
    if (e.key.rfind(o.prefix, 0) == 0 && e.key.size() > o.prefix.size()) {
      kept.emplace_back(e.key.substr(o.prefix.size()), &e);
    }
  }
  if (kept.empty()) {
    throw BadInput(fmt::format("{}: no key starts with '{}'; list its keys with `rankwise-ckpt "
                               "inspect {}`", o.src, o.prefix, o.src));
  }
  return kept;
}

int convert_to_torch_save(const ConvertOptions& o, std::ostream& out) {
  auto source = open_source(o.src);
  rankwise::checkpoint::Checkpoint checkpoint;
  const auto kept = entries_under(*source, o);
  for (const auto& [key, e] : kept) {
    checkpoint.insert(key, e->is_tensor ? c10::IValue(source->tensor(*e)) : source->value(*e));
  }
  rankwise::checkpoint::save(o.dst, checkpoint);
  out << fmt::format("wrote {} entries (flat dotted keys) to {}\n", kept.size(), o.dst);
  return kGood;
}

int convert_to_sharded(const ConvertOptions& o, std::ostream& out) {
  auto source = open_source(o.src);
  rankwise::checkpoint::ShardedState state;
  for (const auto& [key, e] : entries_under(*source, o)) {
    if (e->is_tensor) {
      state.emplace(key, source->tensor(*e));
    } else {
      state.emplace(key, rankwise::checkpoint::ObjectEntry{source->value(*e)});
    }
  }
  rankwise::checkpoint::save_sharded(o.dst, state);
  out << fmt::format("wrote {} entries (flat dotted keys, one rank) to {}\n", state.size(), o.dst);
  return kGood;
}

int convert_to(const ConvertOptions& o, std::ostream& out) {
  if (o.to == "safetensors") return convert_to_safetensors(o, out);
  if (o.to == "torch-save") return convert_to_torch_save(o, out);
  return convert_to_sharded(o, out);
}

// The save's lock file (DST.lock) guards a save against another writer; a
// one-shot conversion leaves only what it wrote.
int convert(const ConvertOptions& o, std::ostream& out) {
  const int status = convert_to(o, out);
  std::error_code ignored;
  fs::remove(o.dst + ".lock", ignored);
  return status;
}

// ---- diff ------------------------------------------------------------------

struct Tolerance {
  std::optional<double> atol, rtol;
  bool bitwise() const { return !atol && !rtol; }
};

// "" when `a` and `b` are equal (bitwise, or within the tolerance), else what differs.
std::string tensor_difference(const at::Tensor& a, const at::Tensor& b, const Tolerance& tol) {
  if (a.scalar_type() != b.scalar_type()) return fmt::format("dtype {} vs {}", dtype_text(a.scalar_type()), dtype_text(b.scalar_type()));
  if (a.sizes() != b.sizes()) return fmt::format("shape {} vs {}", shape_text(a.sizes().vec()), shape_text(b.sizes().vec()));
  at::Tensor differs;
  if (tol.bitwise()) {
    if (std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0) return "";
    const auto bytes_a = a.reshape({-1}).view(at::kByte).reshape({a.numel(), -1});
    const auto bytes_b = b.reshape({-1}).view(at::kByte).reshape({b.numel(), -1});
    differs = (bytes_a != bytes_b).any(1);
  } else if (a.is_floating_point() || a.is_complex()) {
    differs = at::isclose(a, b, tol.rtol.value_or(0), tol.atol.value_or(0), /*equal_nan=*/true).logical_not();
  } else {
    differs = a.to(at::kDouble).sub(b.to(at::kDouble)).abs().gt(
        at::scalar_tensor(tol.atol.value_or(0), at::kDouble) + b.to(at::kDouble).abs() * tol.rtol.value_or(0));
  }
  const int64_t count = differs.sum().item<int64_t>();
  if (count == 0) return "";
  const int64_t first = differs.reshape({-1}).nonzero()[0][0].item<int64_t>();
  const auto da = a.to(at::kDouble), db = b.to(at::kDouble);
  const double max_abs = (da - db).abs().nan_to_num(0).max().item<double>();
  return fmt::format("{} of {} elements differ (first at flat index {}: {} vs {}); max |a - b| {}", count, a.numel(), first,
                     da.reshape({-1})[first].item<double>(), db.reshape({-1})[first].item<double>(), max_abs);
}

// Whether two values (no tensors in them) pickle alike, whatever the types of
// their containers: a List[int] read from a tagged pickle equals Python's list.
bool same_value(const c10::IValue& a, const c10::IValue& b) {
  return pickle::torch_save_pickle(a).bytes == pickle::torch_save_pickle(b).bytes;
}

int diff(const std::string& path_a, const std::string& path_b, const Tolerance& tol, std::ostream& out) {
  auto a = open_source(path_a);
  auto b = open_source(path_b);
  std::map<std::string, const SourceEntry*> in_b;
  for (const auto& e : b->entries()) in_b[e.key] = &e;
  int differences = 0;
  auto report = [&](const std::string& line) {
    out << line << "\n";
    ++differences;
  };
  for (const auto& ea : a->entries()) {
    auto it = in_b.find(ea.key);
    if (it == in_b.end()) {
      report(fmt::format("only in A: {}", ea.key));
      continue;
    }
    const SourceEntry& eb = *it->second;
    in_b.erase(it);
    if (ea.is_tensor != eb.is_tensor) {
      report(fmt::format("differ: {}: a tensor in {} and a value in {}", ea.key, ea.is_tensor ? "A" : "B", ea.is_tensor ? "B" : "A"));
    } else if (ea.is_tensor) {
      const auto why = tensor_difference(a->tensor(ea), b->tensor(eb), tol);
      if (!why.empty()) report(fmt::format("differ: {}: {}", ea.key, why));
    } else if (!same_value(a->value(ea), b->value(eb))) {
      report(fmt::format("differ: {}: {} vs {}", ea.key, rankwise::checkpoint::safetensors::describe_value(a->value(ea)),
                         rankwise::checkpoint::safetensors::describe_value(b->value(eb))));
    }
  }
  for (const auto& e : b->entries()) {
    if (in_b.count(e.key)) report(fmt::format("only in B: {}", e.key));
  }
  if (differences > 0) {
    out << fmt::format("{} differences ({})\n", differences, tol.bitwise() ? "bitwise" : "within the tolerance");
    return kFound;
  }
  out << fmt::format("identical: {} entries{}\n", a->entries().size(),
                           tol.bitwise() ? " (bitwise)" : fmt::format(" (atol {}, rtol {})", tol.atol.value_or(0), tol.rtol.value_or(0)));
  return kGood;
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app("Inspect, verify, convert and diff rankwise checkpoints (a file from save(), a directory from "
               "save_sharded()). Exit status: 0 good, 1 found damage or differences, 2 bad input.",
               "rankwise-ckpt");
  app.require_subcommand(1);
  std::string path, path_b;
  auto* inspect_cmd = app.add_subcommand("inspect", "keys, dtypes, shapes, bytes and files of a checkpoint");
  inspect_cmd->add_option("PATH", path, "checkpoint file or sharded checkpoint directory")->required();
  auto* verify_cmd = app.add_subcommand("verify", "check every recorded CRC-32; exit 1 naming the file and key when one fails");
  verify_cmd->add_option("PATH", path, "checkpoint file or sharded checkpoint directory")->required();
  ConvertOptions convert_options;
  auto* convert_cmd = app.add_subcommand("convert", "write a checkpoint in another format, e.g. "
                                                    "`rankwise-ckpt convert --to safetensors ckpt/step-200 model.safetensors`");
  convert_cmd->add_option("--to", convert_options.to, "safetensors, torch-save (one file) or sharded (a one-rank directory)")
      ->required()
      ->check(CLI::IsMember({"safetensors", "torch-save", "sharded"}));
  convert_cmd->add_option("--max-shard-bytes", convert_options.max_shard_bytes,
                          "safetensors only: at most this many bytes per file; DST is then a directory with "
                          "model-0000i-of-0000N.safetensors and model.safetensors.index.json (default 0: one file)")
      ->check(CLI::NonNegativeNumber);
  convert_cmd->add_option("--prefix", convert_options.prefix,
                          "only the keys under this prefix, written without it (e.g. model.: the weights alone)");
  convert_cmd->add_option("SRC", convert_options.src, "checkpoint to read")->required();
  convert_cmd->add_option("DST", convert_options.dst, "file or directory to write")->required();
  Tolerance tolerance;
  double atol = 0, rtol = 0;
  auto* diff_cmd = app.add_subcommand("diff", "compare two checkpoints key by key, bitwise unless --atol/--rtol; exit 1 when they differ");
  diff_cmd->add_option("A", path, "first checkpoint")->required();
  diff_cmd->add_option("B", path_b, "second checkpoint")->required();
  auto* atol_opt = diff_cmd->add_option("--atol", atol, "absolute tolerance: |a - b| <= atol + rtol * |b| (torch.isclose)")
                       ->check(CLI::NonNegativeNumber);
  auto* rtol_opt = diff_cmd->add_option("--rtol", rtol, "relative tolerance")->check(CLI::NonNegativeNumber);
  static const char* const kCommands[] = {"inspect", "verify", "convert", "diff"};
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(std::begin(kCommands), std::end(kCommands), [&](const char* c) { return std::strcmp(c, argv[1]) == 0; })) {
    err << "rankwise-ckpt: unknown command '" << argv[1]
        << "'; use inspect, verify, convert or diff (`rankwise-ckpt --help` describes them)\n";
    return kBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kGood;
  } catch (const CLI::ParseError& e) {
    err << "rankwise-ckpt: " << e.what() << "; run `rankwise-ckpt --help` for the commands and their arguments\n";
    return kBadInput;
  }
  if (*atol_opt) tolerance.atol = atol;
  if (*rtol_opt) tolerance.rtol = rtol;
  try {
    if (*inspect_cmd) return inspect(path, out);
    if (*verify_cmd) return verify(path, out);
    if (*convert_cmd) return convert(convert_options, out);
    return diff(path, path_b, tolerance, out);
  } catch (const BadInput& e) {
    err << e.what() << "\n";
    return kBadInput;
  } catch (const rankwise::Error& e) {
    err << e.what() << "\n";
    return kBadInput;
  } catch (const std::exception& e) {
    err << "rankwise-ckpt: " << e.what() << "\n";
    return kBadInput;
  }
}

}  // namespace rankwise::checkpoint::tool
