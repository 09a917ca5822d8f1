#include "checkpoint/pickle/pickle_writer.h"

#include <limits>

namespace rankwise::checkpoint::pickle {
namespace {

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() { out_ = "\x80\x02"; }

void PickleWriter::none() { out_.push_back('N'); }

void PickleWriter::boolean(bool value) { out_.push_back(value ? '\x88' : '\x89'); }

void PickleWriter::integer(int64_t value) {
  if (value >= 0 && value < 256) {
    out_.push_back('K');
    append_le(out_, static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value < 65536) {
    out_.push_back('M');
    append_le(out_, static_cast<uint64_t>(value), 2);
  } else if (value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()) {
    out_.push_back('J');
    append_le(out_, static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(value))), 4);
  } else {
    out_ += "\x8a\x08";  // LONG1, 8 bytes of two's complement
    append_le(out_, static_cast<uint64_t>(value), 8);
  }
}

void PickleWriter::string(const std::string& value) {
  out_.push_back('X');
  append_le(out_, value.size(), 4);
  out_ += value;
}

void PickleWriter::global(const std::string& module, const std::string& name) {
  out_.push_back('c');
  out_ += module + "\n" + name + "\n";
}

void PickleWriter::mark() { out_.push_back('('); }
void PickleWriter::tuple() { out_.push_back('t'); }
void PickleWriter::empty_tuple() { out_.push_back(')'); }
void PickleWriter::empty_list() { out_.push_back(']'); }
void PickleWriter::empty_dict() { out_.push_back('}'); }
void PickleWriter::appends() { out_.push_back('e'); }
void PickleWriter::set_items() { out_.push_back('u'); }
void PickleWriter::reduce() { out_.push_back('R'); }
void PickleWriter::new_object() { out_.push_back('\x81'); }
void PickleWriter::build() { out_.push_back('b'); }
void PickleWriter::persistent_id() { out_.push_back('Q'); }

std::string PickleWriter::finish() {
  out_.push_back('.');
  return std::move(out_);
}

}  // namespace rankwise::checkpoint::pickle
