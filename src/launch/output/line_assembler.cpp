#include "launch/output/line_assembler.h"

#include <cstring>

namespace rankwise::launch::output {

void LineAssembler::feed(const char* data, std::size_t n, const LineFn& emit) {
  const char* p = data;
  const char* end = data + n;
  while (p < end) {
    if (pending_cr_) {
      pending_cr_ = false;
      if (*p == '\n') {
        emit(line_, false);
        line_.clear();
        rewritten_ = false;
        ++p;
        continue;
      }
      line_.clear();  // carriage return: the line is being overwritten
      rewritten_ = true;
    }
    // The run of ordinary bytes up to the next '\n' or '\r'.
    const char* stop = p;
    while (stop < end && *stop != '\n' && *stop != '\r') ++stop;
    if (line_.empty() && stop < end && *stop == '\n' &&
        static_cast<std::size_t>(stop - p) < kMaxLineBytes) {
      emit(std::string_view(p, static_cast<std::size_t>(stop - p)), false);  // whole line: no copy
      p = stop + 1;
      continue;
    }
    line_.append(p, static_cast<std::size_t>(stop - p));
    if (line_.size() >= kMaxLineBytes) split_overlong(emit);
    p = stop;
    if (p == end) break;
    if (*p == '\n') {
      emit(line_, false);
      line_.clear();
      rewritten_ = false;
    } else {
      pending_cr_ = true;
    }
    ++p;
  }
}

void LineAssembler::split_overlong(const LineFn& emit) {
  while (line_.size() > kMaxLineBytes) {
    std::size_t cut = kMaxLineBytes;
    // Do not cut inside a UTF-8 sequence: back off over continuation bytes.
    for (int k = 0; k < 3 && cut > 1 && (static_cast<unsigned char>(line_[cut]) & 0xC0) == 0x80; ++k) {
      --cut;
    }
    if ((static_cast<unsigned char>(line_[cut]) & 0xC0) == 0x80) cut = kMaxLineBytes;  // not UTF-8
    emit(std::string_view(line_.data(), cut), true);
    line_.erase(0, cut);
  }
}

void LineAssembler::finish(const LineFn& emit) {
  pending_cr_ = false;
  rewritten_ = false;
  if (!line_.empty()) emit(line_, false);
  line_.clear();
}

}  // namespace rankwise::launch::output
