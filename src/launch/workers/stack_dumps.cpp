#include "launch/workers/stack_dumps.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "launch/watch/hang_watchdog.h"
#include "wire/stack_dump_request.h"

namespace rankwise::launch::workers {

namespace {
std::string read_file(const std::string& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

std::string request_stack_dumps(const std::vector<StackDumpTarget>& targets,
                                std::chrono::milliseconds wait) {
  std::vector<const StackDumpTarget*> asked;
  for (const StackDumpTarget& t : targets) {
    ::unlink(t.file.c_str());
    if (::kill(t.pid, wire::kStackDumpSignal) == 0) asked.push_back(&t);
  }
  auto complete = [](const StackDumpTarget* t) {
    return read_file(t->file).find(wire::kStackDumpEnd) != std::string::npos;
  };
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline &&
         !std::all_of(asked.begin(), asked.end(), complete)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string printed;
  for (const StackDumpTarget* t : asked) {
    const std::string raw = read_file(t->file);
    printed += raw.empty()
                   ? fmt::format("rankwise-run: rank {} wrote no stack dump within {:.0f} s\n",
                                 t->rank, wait.count() / 1000.0)
                   : fmt::format("rankwise-run: stacks of rank {}:\n{}", t->rank,
                                 watch::format_stack_dump(raw, "rankwise-run:   "));
  }
  return printed;
}

}  // namespace rankwise::launch::workers
