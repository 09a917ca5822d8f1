// In-process tests of the launcher's building blocks (src/launch): line
// assembly, tag templates, --nproc-per-node resolution, GPU counting.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "launch/cpu_sched.h"
#include "launch/devices.h"
#include "launch/line_assembler.h"
#include "launch/options.h"
#include "launch/summary.h"
#include "launch/tag_template.h"
#include "launch/worker_group.h"

namespace rankwise::launch {
namespace {

std::vector<std::string> assemble(const std::vector<std::string>& pieces, bool finish = true) {
  LineAssembler a;
  std::vector<std::string> lines;
  auto emit = [&](std::string_view line, bool continued) {
    lines.emplace_back(std::string(line) + (continued ? "<cont>" : ""));
  };
  for (const auto& p : pieces) a.feed(p.data(), p.size(), emit);
  if (finish) a.finish(emit);
  return lines;
}

TEST(LaunchLineAssembler, JoinsPiecesIntoWholeLines) {
  EXPECT_EQ(assemble({"he", "llo\nwor", "ld\n", "\n"}),
            (std::vector<std::string>{"hello", "world", ""}));
}

TEST(LaunchLineAssembler, EmitsUnterminatedRestOnlyAtFinish) {
  EXPECT_TRUE(assemble({"partial"}, /*finish=*/false).empty());
  EXPECT_EQ(assemble({"partial"}), (std::vector<std::string>{"partial"}));
}

TEST(LaunchLineAssembler, CarriageReturnKeepsLastState) {
  EXPECT_EQ(assemble({"\r10%", "\r20%\r", "30%\ndone\r\n"}),
            (std::vector<std::string>{"30%", "done"}));
  // CRLF split across writes is still a plain line end.
  EXPECT_EQ(assemble({"line\r", "\nnext\n"}), (std::vector<std::string>{"line", "next"}));
  EXPECT_EQ(assemble({"\rfinal state\r"}), (std::vector<std::string>{"final state"}));
}

TEST(LaunchLineAssembler, SplitsOverlongLinesWithMarker) {
  const std::string big(kMaxLineBytes + 100, 'x');
  const auto lines = assemble({big + "\n"});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(kMaxLineBytes, 'x') + "<cont>");
  EXPECT_EQ(lines[1], std::string(100, 'x'));
  // Exactly the limit: not split.
  EXPECT_EQ(assemble({std::string(kMaxLineBytes, 'y') + "\n"}).size(), 1u);
}

TEST(LaunchLineAssembler, SplitDoesNotCutUtf8Sequence) {
  // "é" is 0xC3 0xA9; put it across the cut point.
  std::string s(kMaxLineBytes - 1, 'a');
  s += "\xC3\xA9tail\n";
  const auto lines = assemble({s});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(kMaxLineBytes - 1, 'a') + "<cont>");
  EXPECT_EQ(lines[1], "\xC3\xA9tail");
}

TEST(LaunchLineAssembler, PassesInvalidUtf8Through) {
  EXPECT_EQ(assemble({"a\xff\xfe\n"}), (std::vector<std::string>{"a\xff\xfe"}));
}

TEST(LaunchTagTemplate, RendersEveryPlaceholder) {
  const TagTemplate t =
      TagTemplate::parse("{host}:{node_rank}:{rank}/{world_size}:{local_rank} {{x}} ");
  EXPECT_EQ(t.render({5, 1, 2, 8, "h"}), "h:2:5/8:1 {x} ");
  EXPECT_EQ(TagTemplate::parse(kDefaultTag).render({3, 0, 0, 4, "h"}), "[rank3]: ");
  EXPECT_EQ(TagTemplate::parse("").render({3, 0, 0, 4, "h"}), "");
}

TEST(LaunchTagTemplate, RejectsUnknownPlaceholderNamingIt) {
  try {
    TagTemplate::parse("[{rnk}] ");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--tag"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("{rnk}"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TagTemplate::parse("[{rank] "), UsageError);
  EXPECT_THROW(TagTemplate::parse("rank}"), UsageError);
}

TEST(LaunchNproc, ParsesNumbersAndKeywords) {
  EXPECT_EQ(resolve_nproc_per_node("3"), 3);
  EXPECT_EQ(resolve_nproc_per_node("cpu"), cpu_core_count());
  EXPECT_GE(resolve_nproc_per_node("auto"), 1);
  EXPECT_THROW(resolve_nproc_per_node("0"), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("-2"), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("two"), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("2x"), UsageError);
}

/// parse_command_line over `args` (program name prepended); the UsageError text.
std::string usage_error(std::vector<std::string> args) {
  args.insert(args.begin(), "rankwise-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    parse_command_line(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(LaunchCli, BadUsageNamesTheFlag) {
  char templ[] = "/tmp/rankwise-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string dir = templ, data = dir + "/data.txt";
  { std::ofstream(data) << "x"; }
  const std::string sh = "/bin/sh";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "0", sh}, "--nproc-per-node 0: must be at least 1"},
      {{"--nproc_per_node", "two", sh}, "--nproc-per-node 'two'"},
      {{"--nproc-per-node", "2"}, "no PROGRAM given"},
      {{dir + "/missing"}, "program '" + dir + "/missing' not found"},
      {{"no-such-program-rankwise"}, "'no-such-program-rankwise' not found in PATH"},
      {{data}, "is not an executable file"},
      {{"--tag", "[{rnk}] ", sh}, "--tag '[{rnk}] ': unknown placeholder {rnk}"},
      {{"--nnodes", "2", sh}, "--nnodes 2 needs --master-port"},
      {{"--nnodes", "1:2", sh}, "--nnodes"},
      {{"--nnodes", "0", sh}, "--nnodes 0: must be at least 1"},
      {{"--node-rank", "1", sh}, "--node-rank 1: must be in [0, 1)"},
      {{"--standalone", "--nnodes", "2", "--master-port", "29500", sh}, "--standalone"},
      {{"--master-port", "70000", sh}, "--master-port 70000"},
      {{"--only-ranks", "0,5", "--nproc-per-node", "2", sh}, "--only-ranks '0,5'"},
      {{"--only_ranks", "x", sh}, "--only-ranks 'x'"},
      {{"--max-restarts", "-1", sh}, "--max-restarts"},
      {{"--grace-period", "-1", sh}, "--grace-period"},
      {{"--monitor-interval", "0", sh}, "--monitor-interval"},
      {{"--rendezvous-timeout", "0", sh}, "--rendezvous-timeout"},
      {{"--bogus", sh}, "unknown option '--bogus'"},
      {{"--iface", "no-such-if0", sh}, "--iface 'no-such-if0': 'no-such-if0' is not a network"},
      {{"--iface", "lo,", sh}, "--iface 'lo,'"},
      {{"--cpu-sched", "fifo", sh}, "--cpu-sched 'fifo': use inherit, normal, batch or idle"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string msg = usage_error(args);
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
  }
  std::filesystem::remove_all(dir);
}

TEST(LaunchCli, OptionsEndAtTheProgram) {
  std::vector<std::string> args = {"rankwise-run", "--nproc_per_node", "3", "--no-tag",
                                   "--grace-period", "0.5", "sh", "-c", "--nnodes", "-h"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto o = parse_command_line(static_cast<int>(argv.size()), argv.data());
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->nproc_per_node, 3);
  EXPECT_FALSE(o->tag_enabled);
  EXPECT_EQ(o->grace_period, std::chrono::milliseconds(500));
  EXPECT_EQ(o->program_argv, (std::vector<std::string>{"sh", "-c", "--nnodes", "-h"}));
  EXPECT_EQ(o->program.substr(o->program.size() - 3), "/sh");
  EXPECT_FALSE(o->master_port.has_value());
  EXPECT_EQ(o->world_size(), 3);
}

TEST(LaunchCli, IfaceSetsGlooSocketIfnameForWorkers) {
  std::vector<std::string> args = {"rankwise-run", "--iface", "lo", "sh"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto o = parse_command_line(static_cast<int>(argv.size()), argv.data());
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->iface, "lo");
  AttemptConfig c;
  c.options = &*o;
  c.base_env = {"GLOO_SOCKET_IFNAME=eth9", "HOME=/root"};
  const auto env = worker_environment(c, 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "GLOO_SOCKET_IFNAME=lo"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "GLOO_SOCKET_IFNAME=eth9"), 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "HOME=/root"), 1);

  LaunchOptions plain;
  c.options = &plain;
  const auto kept = worker_environment(c, 0);  // without --iface the launcher's value passes
  EXPECT_EQ(std::count(kept.begin(), kept.end(), "GLOO_SOCKET_IFNAME=eth9"), 1);
}

TEST(LaunchCli, CpuSchedValuesAndTheirPolicies) {
  for (const auto& [name, policy] : std::vector<std::pair<std::string, CpuSched>>{
           {"inherit", CpuSched::kInherit}, {"normal", CpuSched::kNormal},
           {"batch", CpuSched::kBatch}, {"idle", CpuSched::kIdle}}) {
    std::vector<std::string> args = {"rankwise-run", "--cpu_sched", name, "sh"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    const auto o = parse_command_line(static_cast<int>(argv.size()), argv.data());
    ASSERT_TRUE(o.has_value());
    EXPECT_EQ(o->cpu_sched, policy) << name;
    EXPECT_EQ(cpu_sched_name(policy), name);
  }
  EXPECT_EQ(linux_sched_policy(CpuSched::kInherit), -1);
}

TEST(LaunchDevices, CountsGpusFromDriverDirAndVisibleDevices) {
  char templ[] = "/tmp/rankwise-gpus-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string dir = templ;
  EXPECT_EQ(visible_gpu_count(std::nullopt, dir + "/absent"), 0);
  EXPECT_EQ(visible_gpu_count(std::string("0,1"), dir + "/absent"), 0);
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) {
    std::filesystem::create_directory(dir + "/" + bus);
  }
  EXPECT_EQ(visible_gpu_count(std::nullopt, dir), 3);
  EXPECT_EQ(visible_gpu_count(std::string("1,2"), dir), 2);
  EXPECT_EQ(visible_gpu_count(std::string(""), dir), 0);
  EXPECT_EQ(visible_gpu_count(std::string("-1"), dir), 0);
  EXPECT_EQ(visible_gpu_count(std::string("0,7,1"), dir), 1);  // ends at the invalid index
  EXPECT_EQ(visible_gpu_count(std::string("GPU-abc,GPU-def"), dir), 2);
  std::filesystem::remove_all(dir);
}

TEST(LaunchSummary, NamesSignalsAndExitCodes) {
  EXPECT_EQ(signal_name(9), "SIGKILL");
  EXPECT_EQ(signal_name(15), "SIGTERM");
  WorkerRecord w;
  w.exit_code = 3;
  EXPECT_EQ(describe_exit(w), "exited with code 3");
  w.term_signal = 11;
  EXPECT_EQ(describe_exit(w), "was killed by SIGSEGV (signal 11)");
}

}  // namespace
}  // namespace rankwise::launch
