// launch::LineAssembler, which turns a worker's output bytes into tagged
// lines, on arbitrary streams cut into arbitrary pieces. Checks, besides
// "no crash": the lines do not depend on how the stream was cut (the same
// bytes fed one at a time give the same lines), no line holds '\n' or '\r',
// and no piece exceeds kMaxLineBytes.
//
// Input language (so that short inputs make overlong lines): a byte b, then
//   b < 0xf0: a piece of (b % 64) literal bytes that follow;
//   b >= 0xf0: a piece of the next 1..4 bytes repeated to (b - 0xef) * 8 KiB;
// at most 192 KiB in all.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launch/output/line_assembler.h"

namespace {

using rankwise::launch::output::LineAssembler;

struct Line {
  std::string text;
  bool continued;
  bool operator==(const Line& o) const { return text == o.text && continued == o.continued; }
};

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "LineAssembler: %s\n", why);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> pieces;
  size_t total = 0;  // bounded, so one input stays fast: 192 KiB (3 x kMaxLineBytes)
  for (size_t at = 0; at < size && total < (size_t{192} << 10);) {
    const uint8_t b = data[at++];
    if (b < 0xf0) {
      const size_t n = std::min<size_t>(b % 64, size - at);
      pieces.emplace_back(reinterpret_cast<const char*>(data + at), n);
      at += n;
    } else {
      const size_t n = std::min<size_t>(1 + (b & 3), size - at);
      const std::string unit(reinterpret_cast<const char*>(data + at), n);
      at += n;
      std::string run;
      for (size_t i = 0; !unit.empty() && run.size() < size_t(b - 0xef) * 8192; ++i) run += unit;
      pieces.push_back(std::move(run));
    }
    total += pieces.back().size();
  }
  std::vector<Line> in_pieces, bytewise;
  auto collect = [](std::vector<Line>& out) {
    return [&out](std::string_view line, bool continued) {
      if (line.size() > rankwise::launch::output::kMaxLineBytes) fail("a line exceeds kMaxLineBytes");
      if (line.find_first_of("\r\n") != std::string_view::npos) fail("a line holds CR or LF");
      out.push_back({std::string(line), continued});
    };
  };
  {
    LineAssembler a;
    const LineAssembler::LineFn emit = collect(in_pieces);
    for (const auto& p : pieces) a.feed(p.data(), p.size(), emit);
    a.finish(emit);
  }
  {
    LineAssembler a;
    const LineAssembler::LineFn emit = collect(bytewise);
    for (const auto& p : pieces)
      for (char c : p) a.feed(&c, 1, emit);
    a.finish(emit);
  }
  if (!(in_pieces == bytewise)) fail("the lines depend on how the stream was cut");
  return 0;
}
