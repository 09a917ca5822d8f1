#include "checkpoint/detail/python_pickle.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "rankwise/error.h"

namespace rankwise::detail {
namespace {

constexpr char kOrderedDict[] = "collections\nOrderedDict\n";

// One entry of the modelled unpickler stack: where its bytes start in the
// output and what it is, as far as the rewrite cares.
enum class Kind { kOther, kMark, kOrderedDictClass, kEmptyArgs, kOrderedDict };
struct Item {
  std::size_t start;
  Kind kind;
};

class Rewriter {
 public:
  Rewriter(const char* data, std::size_t size) : in_(data), size_(size) {}

  std::string run() {
    while (at_ < size_) {
      const std::size_t op_start = at_;
      const auto op = static_cast<unsigned char>(in_[at_++]);
      if (!step(op, op_start)) return out_;
    }
    fail("it ends without STOP");
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw CheckpointError("rankwise: cannot read this Python pickle (data.pkl) with libtorch: " +
                          why + " (at byte " + std::to_string(at_) + ")");
  }

  void need(std::size_t n) const {
    if (at_ + n > size_) fail("it is truncated");
  }
  uint32_t le(std::size_t n) {
    need(n);
    uint32_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= uint32_t(static_cast<unsigned char>(in_[at_ + i])) << (8 * i);
    at_ += n;
    return v;
  }
  void skip_line() {
    const void* nl = std::memchr(in_ + at_, '\n', size_ - at_);
    if (!nl) fail("a text argument has no end");
    at_ = static_cast<std::size_t>(static_cast<const char*>(nl) - in_) + 1;
  }

  Item pop() {
    if (stack_.empty()) fail("stack underflow");
    Item top = stack_.back();
    stack_.pop_back();
    if (top.kind == Kind::kOrderedDictClass || top.kind == Kind::kEmptyArgs) {
      fail("collections.OrderedDict is used other than as OrderedDict()");
    }
    return top;
  }
  std::size_t pop_to_mark() {
    while (!stack_.empty() && stack_.back().kind != Kind::kMark) pop();
    if (stack_.empty()) fail("no MARK");
    const std::size_t start = stack_.back().start;
    stack_.pop_back();
    return start;
  }
  void copy(std::size_t from) { out_.append(in_ + from, at_ - from); }
  void push(std::size_t start, Kind kind = Kind::kOther) { stack_.push_back({start, kind}); }

  // Handles one opcode; false after STOP.
  bool step(unsigned char op, std::size_t op_start) {
    const std::size_t here = out_.size();
    switch (op) {
      case 0x80: le(1); copy(op_start); return true;                 // PROTO
      case '.': copy(op_start); return false;                        // STOP
      case '(': copy(op_start); push(here, Kind::kMark); return true;  // MARK
      case 'c': {                                                    // GLOBAL
        const std::size_t name = at_;
        skip_line();
        skip_line();
        if (at_ - name == sizeof(kOrderedDict) - 1 &&
            std::memcmp(in_ + name, kOrderedDict, at_ - name) == 0) {
          push(here, Kind::kOrderedDictClass);  // emitted as EMPTY_DICT at REDUCE
        } else {
          copy(op_start);
          push(here);
        }
        return true;
      }
      case 'q': case 'r': {                                          // BINPUT, LONG_BINPUT
        const uint32_t id = le(op == 'q' ? 1 : 4);
        if (stack_.empty()) fail("memo of an empty stack");
        if (stack_.back().kind == Kind::kOrderedDictClass) {
          class_memo_.insert(id);
        } else {
          copy(op_start);
        }
        return true;
      }
      case 'h': case 'j': {                                          // BINGET, LONG_BINGET
        const uint32_t id = le(op == 'h' ? 1 : 4);
        if (class_memo_.count(id)) {
          push(here, Kind::kOrderedDictClass);
        } else {
          copy(op_start);
          push(here);
        }
        return true;
      }
      case ')':                                                      // EMPTY_TUPLE
        if (!stack_.empty() && stack_.back().kind == Kind::kOrderedDictClass) {
          push(here, Kind::kEmptyArgs);
        } else {
          copy(op_start);
          push(here);
        }
        return true;
      case 'R': {                                                    // REDUCE
        if (stack_.size() >= 2 && stack_.back().kind == Kind::kEmptyArgs &&
            stack_[stack_.size() - 2].kind == Kind::kOrderedDictClass) {
          stack_.pop_back();
          const std::size_t start = stack_.back().start;
          stack_.pop_back();
          out_ += '}';  // EMPTY_DICT
          push(start, Kind::kOrderedDict);
        } else {
          pop();
          const std::size_t start = pop().start;
          copy(op_start);
          push(start);
        }
        return true;
      }
      case 'b': {                                                    // BUILD
        const Item state = pop();
        if (!stack_.empty() && stack_.back().kind == Kind::kOrderedDict) {
          // [dict, state] -> [dict, MARK, key, state], SETITEMS: dict[key] = state.
          std::string key = "(";
          key += 'X';
          const auto n = static_cast<uint32_t>(std::strlen(kPickleStateKey));
          for (int i = 0; i < 4; ++i) key += static_cast<char>((n >> (8 * i)) & 0xff);
          key += kPickleStateKey;
          out_.insert(state.start, key);
          out_ += 'u';
        } else {
          copy(op_start);
        }
        return true;
      }
      // Opcodes with fixed-size arguments that push one item.
      case 'K': le(1); break;                                        // BININT1
      case 'M': le(2); break;                                        // BININT2
      case 'J': le(4); break;                                        // BININT
      case 'G': need(8); at_ += 8; break;                            // BINFLOAT
      case 0x8a: { const uint32_t n = le(1); need(n); at_ += n; break; }  // LONG1
      case 0x8b: { const uint32_t n = le(4); need(n); at_ += n; break; }  // LONG4
      case 'X': case 'T': case 'B': { const uint32_t n = le(4); need(n); at_ += n; break; }
      case 'U': case 'C': case 0x8c: { const uint32_t n = le(1); need(n); at_ += n; break; }
      case 'N': case 0x88: case 0x89: case '}': case ']': break;     // NONE, TRUE, FALSE, {}, []
      case 'I': case 'L': case 'F': case 'S': case 'V': skip_line(); break;
      // Opcodes that combine stack items.
      case 't': case 'l': case 'd': {                                // TUPLE, LIST, DICT
        const std::size_t start = pop_to_mark();
        copy(op_start);
        push(start);
        return true;
      }
      case 0x85: case 0x86: case 0x87: {                             // TUPLE1..3
        std::size_t start = here;
        for (int i = 0; i < op - 0x84; ++i) start = pop().start;
        copy(op_start);
        push(start);
        return true;
      }
      case 'a': {                                                    // APPEND -> MARK .. APPENDS
        out_.insert(pop().start, 1, '(');
        out_ += 'e';
        return true;
      }
      case 's': {                                                    // SETITEM -> MARK .. SETITEMS
        pop();
        out_.insert(pop().start, 1, '(');
        out_ += 'u';
        return true;
      }
      case 'e': case 'u': pop_to_mark(); copy(op_start); return true;  // APPENDS, SETITEMS
      case 'Q': { const std::size_t start = pop().start; copy(op_start); push(start); return true; }  // BINPERSID
      case 0x81: { pop(); const std::size_t start = pop().start; copy(op_start); push(start); return true; }  // NEWOBJ
      default:
        fail("unsupported opcode 0x" + [op] {
          char hex[3];
          std::snprintf(hex, sizeof hex, "%02x", op);
          return std::string(hex);
        }());
    }
    copy(op_start);
    push(here);
    return true;
  }

  const char* in_;
  std::size_t size_;
  std::size_t at_ = 0;
  std::string out_;
  std::vector<Item> stack_;
  std::set<uint32_t> class_memo_;
};

}  // namespace

std::string adapt_python_pickle(const char* pickle, std::size_t size) {
  return Rewriter(pickle, size).run();
}

void strip_pickle_state(const c10::IValue& value) {
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict();
    (void)dict.erase(c10::IValue(std::string(kPickleStateKey)));
    for (const auto& entry : dict) strip_pickle_state(entry.value());
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) strip_pickle_state(item);
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) strip_pickle_state(item);
  }
}

}  // namespace rankwise::detail
