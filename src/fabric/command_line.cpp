#include "fabric/command_line.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"
#include "rankwise/error.h"
#include "rankwise/fabric/cli.h"

namespace rankwise {

std::string device_option_error(const std::string& value) {
  const bool cuda_n = value.size() > 5 && value.compare(0, 5, "cuda:") == 0 &&
                      value.size() <= 9 &&
                      value.find_first_not_of("0123456789", 5) == std::string::npos;
  if (value == "auto" || value == "cpu" || value == "cuda" || cuda_n) return "";
  return "'" + value + "' is not a device; use auto, cpu, cuda or cuda:N";
}

std::string precision_option_error(const std::string& value) {
  if (value == "32-true" || value == "bf16-mixed" || value == "16-mixed" || value == "bf16-true") {
    return "";
  }
  return "'" + value + "' is not a precision; use 32-true, bf16-mixed, 16-mixed or bf16-true";
}

namespace fabric {
namespace {

// Removes from argv what `app` parsed, keeping argv[0] and the other
// arguments in order; returns the new argc (argv[argc] is null when
// something was removed).
int keep_remaining(const CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> remaining = app.remaining();
  int kept = 1;
  std::size_t next = 0;
  for (int i = 1; i < argc && next < remaining.size(); ++i) {
    if (remaining[next] == argv[i]) {
      argv[kept++] = argv[i];
      ++next;
    }
  }
  if (kept < argc) argv[kept] = nullptr;  // else argv[argc] stays as the caller had it
  return kept;
}

bool help_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

// With --help: the Fabric's flags (rank 0); `--help` stays in argv for the
// program's own parser, which prints its flags and exits.
void print_fabric_help(const CLI::App& app) {
  if (!fabric::prints_help()) return;
  std::cout << app.help() << "(the options of rankwise::Fabric; the program's own, if it parses "
            << "any, follow)\n"
            << std::flush;
}

// The number of one-character insertions, deletions, substitutions and
// swaps of two neighbours that turn `a` into `b` (optimal string alignment).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The Fabric flag that `arg` (a flag the Fabric left to the program) is
// probably a misspelling of: the start of one (--resum), or one or two
// typos away (one for flags of up to 6 letters); "" when none is.
std::string misspelt_flag(const CLI::App& app, const std::string& arg) {
  const std::string name = arg.substr(2, arg.find('=') - 2);
  std::string best;
  std::size_t best_distance = 3;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& flag : option->get_lnames()) {
      if (name == flag) continue;
      const std::size_t allowed = flag.size() <= 6 ? 1 : 2;
      const bool start = name.size() >= 3 && flag.compare(0, name.size(), name) == 0;
      const std::size_t distance = start ? 0 : edit_distance(name, flag);
      if (distance <= allowed && distance < best_distance) best = flag, best_distance = distance;
    }
  }
  return best.empty() ? "" : "--" + best;
}

// A flag of the Fabric's, misspelt, would leave the run on a default without
// a word: refused, naming the flag meant (docs/fabric.md, "Command line").
void refuse_misspelt_flags(const CLI::App& app) {
  for (const std::string& arg : app.remaining()) {
    if (arg == "--") return;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    const std::string meant = misspelt_flag(app, arg);
    if (meant.empty()) continue;
    core::raise<ConfigError>(
        "{} is not a flag of rankwise::Fabric; did you mean {}? (a program's own flag this close "
        "to one of the Fabric's is refused too: give it another name; --help lists the Fabric's)",
        arg.substr(0, arg.find('=')), meant);
  }
}

}  // namespace

std::optional<FabricOptions> parse_command_line(int& argc, char** argv, FabricOptions options) {
  CLI::App app{"rankwise::Fabric options"};
  app.allow_extras();
  app.set_help_flag();  // --help is the program's too: handled here
  fabric::add_fabric_options(app, options);
  const bool help = help_requested(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (!help) core::raise<ConfigError>("{} (run with --help for the options)", e.what());
  }
  if (help) {
    print_fabric_help(app);
    return std::nullopt;
  }
  for (const char* flag : {"--fsdp-reshard-after-forward", "--fsdp-min-unit-params"}) {
    if (app.count(flag) > 0 && options.strategy() != "fsdp") {
      core::raise<ConfigError>("{} applies to --strategy fsdp, and this run's strategy is {}: add "
                               "--strategy fsdp, or leave the flag out",
                               flag, options.strategy());
    }
  }
  refuse_misspelt_flags(app);
  argc = keep_remaining(app, argc, argv);
  return options;
}

}  // namespace fabric
}  // namespace rankwise
