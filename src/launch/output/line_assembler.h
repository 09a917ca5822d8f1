#pragma once
/// \file line_assembler.h
/// Turns the bytes one worker stream writes, in pieces of any size, into whole
/// lines.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace rankwise::launch::output {

/// Longest line emitted in one piece; longer lines are split, and each piece
/// but the last ends with kContinuationMarker.
constexpr std::size_t kMaxLineBytes = 64 * 1024;

/// Appended to a piece of a line that was split because it exceeded
/// kMaxLineBytes; the line continues on the next tagged line.
constexpr std::string_view kContinuationMarker = " [rankwise-run: line continues]";

/// Line buffer of one stream (one worker's stdout, or its stderr).
///
/// Rules: '\n' ends a line ("\r\n" too). A '\r' not followed by '\n' returns to
/// the start of the line, as on a terminal: what came before it on that line is
/// dropped, so a carriage-return progress bar yields only its last state. Bytes
/// are passed through unchanged (invalid UTF-8 included); a split of an overlong
/// line avoids cutting a UTF-8 sequence. finish() emits what is left (output
/// without a final newline) when the stream ends.
class LineAssembler {
 public:
  /// Receives each complete line, without its '\n'; `continued` is true for a
  /// piece of an overlong line (the caller appends kContinuationMarker).
  using LineFn = std::function<void(std::string_view line, bool continued)>;

  /// Consumes `n` bytes and emits every line they complete.
  void feed(const char* data, std::size_t n, const LineFn& emit);
  /// Emits the unterminated rest, if any (end of stream).
  void finish(const LineFn& emit);
  /// The unfinished line's current state when a '\r' has rewritten it (a
  /// progress bar between updates), for showing it in place on a terminal;
  /// empty otherwise (no line begun, or one merely not yet ended).
  std::string_view rewritten_line() const { return rewritten_ ? std::string_view(line_) : std::string_view(); }

 private:
  void split_overlong(const LineFn& emit);

  std::string line_;
  bool pending_cr_ = false;
  bool rewritten_ = false;  // a '\r' rewrote the unfinished line_
};

}  // namespace rankwise::launch::output
