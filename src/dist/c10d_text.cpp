#include "dist/c10d_text.h"

#include <c10/util/Exception.h>

#include <fmt/format.h>

#include <regex>
#include <utility>
#include <vector>

namespace rankwise::dist {

std::string in_rankwise_terms(const std::string& c10d_text) {
  // In order: sentences to drop, then Python spellings to replace.
  static const std::vector<std::pair<std::regex, std::string>> rewrites = [] {
    const std::string options = "DistributedDataParallelOptions()";
    std::vector<std::pair<std::regex, std::string>> r;
    // A sentence that sends the user to TORCH_DISTRIBUTED_DEBUG (rankwise names
    // the parameters itself), or asks for a PyTorch bug report.
    r.emplace_back("[ \\t]*[^.\\n]*TORCH_DISTRIBUTED_DEBUG[^.\\n]*\\.?", "");
    r.emplace_back("\\s*\\n\\s*", " ");
    r.emplace_back(
        "\\s*Please include the loss function.*?when reporting this issue( \\([^)]*\\))?\\.?", "");
    r.emplace_back("`?find_unused_parameters=True`?", options + ".find_unused_parameters(true)");
    r.emplace_back("`?find_unused_parameters=False`?", options + ".find_unused_parameters(false)");
    r.emplace_back("_set_static_graph\\(\\)", options + ".static_graph(true)");
    r.emplace_back("static_graph set to True|static_graph=True", "static_graph(true)");
    r.emplace_back("(passing )?the keyword argument ", "passing ");
    r.emplace_back("`?torch\\.nn\\.parallel\\.DistributedDataParallel`?",
                   "rankwise::parallel::DistributedDataParallel");
    r.emplace_back("was specified in (the )?(DDP|DistributedDataParallel) constructor", "was set");
    r.emplace_back("(DDP|DistributedDataParallel) constructor", "DistributedDataParallel");
    r.emplace_back("  +", " ");
    return r;
  }();
  std::string text = c10d_text;
  for (const auto& [pattern, replacement] : rewrites) {
    text = std::regex_replace(text, pattern, replacement);
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

std::string rendezvous_failure_cause(const std::string& text, std::chrono::milliseconds timeout) {
  static const std::regex closed("closed by peer|reset by peer|broken pipe", std::regex::icase);
  static const std::regex timed_out("timed out|timeout", std::regex::icase);
  if (std::regex_search(text, closed)) {
    return "another rank closed its connection: it exited or was killed during the rendezvous "
           "(its own error, if any, comes first)";
  }
  if (std::regex_search(text, timed_out)) {
    return fmt::format("not every rank arrived within {} ms (InitOptions::timeout)", timeout.count());
  }
  return "";
}

}  // namespace rankwise::dist
