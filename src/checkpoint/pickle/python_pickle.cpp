#include "checkpoint/pickle/python_pickle.h"

#include "core/check.h"

#include <cstring>
#include <algorithm>
#include <set>
#include <unordered_map>
#include <vector>

#include "checkpoint/pickle/limits.h"
#include "checkpoint/pickle/unpickled_value.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::pickle {
namespace {

constexpr char kOrderedDict[] = "collections\nOrderedDict\n";

// Python values that pickle through a GLOBAL libtorch's Unpickler does not
// know (torch.save uses pickle protocol 2): what each is, for the error.
struct PythonGlobal {
  const char* name;  // "module\nname\n", as GLOBAL spells it
  const char* what;
};
constexpr PythonGlobal kPythonOnly[] = {
    {"__builtin__\nset\n", "a Python set"},         {"builtins\nset\n", "a Python set"},
    {"__builtin__\nfrozenset\n", "a Python frozenset"}, {"builtins\nfrozenset\n", "a Python frozenset"},
    {"_codecs\nencode\n", "a Python bytes value"},  {"__builtin__\nbytearray\n", "a Python bytearray"},
    {"builtins\nbytearray\n", "a Python bytearray"}, {"__builtin__\ncomplex\n", "a Python complex number"},
    {"builtins\ncomplex\n", "a Python complex number"}, {"__builtin__\nslice\n", "a Python slice"},
    {"builtins\nslice\n", "a Python slice"},
};

// One entry of the modelled unpickler stack: where its bytes start in the
// output and what it is, as far as the rewrite cares.
enum class Kind { kOther, kOrderedDictClass, kEmptyArgs, kOrderedDict };
struct Item {
  std::size_t start;
  Kind kind;
  int depth;  // how many opcodes combined values into this one, nested
};
// A MARK: the stack size when it was pushed and where its byte is in the output.
struct Mark {
  std::size_t stack_size;
  std::size_t start;
};

// The model follows Python's unpickler, which is strict where libtorch 1.13's
// is not (it pops an empty stack or reads past a MARK: undefined behaviour):
// MARK opens a frame, an opcode pops only items above the last MARK, a memo
// entry is an item of the current frame, and STOP leaves exactly one item.
// A pickle that passes this walk is therefore safe for libtorch's Unpickler.
class Rewriter {
 public:
  Rewriter(const char* data, std::size_t size, const std::string& path)
      : in_(data), size_(size), path_(path) {}

  std::string run() {
    while (at_ < size_) {
      const std::size_t op_start = at_;
      const auto op = static_cast<unsigned char>(in_[at_++]);
      if (!step(op, op_start)) return out_;
    }
    fail("it ends without STOP");
  }

 private:
  // A value of Python's that libtorch cannot represent: the file is fine.
  [[noreturn]] void python_only(const std::string& what) const {
    core::raise<CheckpointError>(
        "'{}' holds {}, which libtorch cannot represent (the file itself is intact). A torch.save "
        "file that C++ reads may hold tensors, dicts (OrderedDicts too), lists, tuples, strings, "
        "ints, floats, bools and None: in Python, convert other values (sets, bytes, numpy arrays, "
        "objects of your own classes) before torch.save",
        path_, what);
  }

  [[noreturn]] void fail(const std::string& why) const {
    core::raise<CheckpointError>(
        "cannot read the pickle (data.pkl) of '{}' with libtorch: {} (at byte {}); the file is "
        "corrupt or was not written by torch.save / rankwise::checkpoint::save: do not use it",
        path_, why, at_);
  }

  void need(std::size_t n) const {
    if (n > size_ - at_) fail("it is truncated");
  }
  uint32_t le(std::size_t n) {
    need(n);
    uint32_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= uint32_t(static_cast<unsigned char>(in_[at_ + i])) << (8 * i);
    at_ += n;
    return v;
  }
  // A memo index. Picklers number memo entries from 0, one per memoized
  // object; libtorch's Unpickler sizes its memo table by the largest index
  // (16 bytes an entry), so a corrupt one could make it allocate 64 GiB.
  uint32_t memo_id(std::size_t n) {
    const uint32_t id = le(n);
    if (id > kMaxMemo) fail(fmt::format("memo index {} is out of range", id));
    return id;
  }
  void skip_line() {
    const void* nl = std::memchr(in_ + at_, '\n', size_ - at_);
    if (!nl) fail("a text argument has no end");
    at_ = static_cast<std::size_t>(static_cast<const char*>(nl) - in_) + 1;
  }

  // Items of the current frame (above the last MARK).
  std::size_t frame_size() const {
    return stack_.size() - (marks_.empty() ? 0 : marks_.back().stack_size);
  }
  const Item& top(const char* op) const {
    if (frame_size() == 0) fail(fmt::format("{} on an empty stack", op));
    return stack_.back();
  }
  // The item that opcode `op` changes in place (a list, dict or object):
  // one the rewrite emits.
  // It now holds what this opcode popped.
  const Item& target(const char* op) {
    (void)top(op);
    Item& item = stack_.back();
    if (item.kind == Kind::kOrderedDictClass || item.kind == Kind::kEmptyArgs) {
      fail("collections.OrderedDict is used other than as OrderedDict()");
    }
    item.depth = std::max(item.depth, nested_depth());
    return item;
  }
  Item pop() {
    if (frame_size() == 0) fail("stack underflow");
    Item top = stack_.back();
    stack_.pop_back();
    popped_depth_ = std::max(popped_depth_, top.depth);
    if (top.kind == Kind::kOrderedDictClass || top.kind == Kind::kEmptyArgs) {
      fail("collections.OrderedDict is used other than as OrderedDict()");
    }
    return top;
  }
  // Pops the frame of the last MARK for opcode `name`; `pairs`: its items
  // must be key-value pairs; `into_container`: an item below the MARK
  // receives them.
  std::size_t pop_to_mark(const char* name, bool pairs, bool into_container) {
    if (marks_.empty()) fail(fmt::format("{} without a MARK", name));
    if (pairs && frame_size() % 2 != 0) fail("a key without a value");
    while (frame_size() > 0) pop();
    const Mark mark = marks_.back();
    marks_.pop_back();
    if (into_container) (void)target(name);
    return mark.start;
  }
  void copy(std::size_t from) { out_.append(in_ + from, at_ - from); }
  // The depth of a value made of what this opcode popped (0: it popped nothing).
  int nested_depth() const {
    const int depth = popped_depth_ < 0 ? 0 : popped_depth_ + 1;
    if (depth > kMaxDepth) {
      fail(fmt::format("its values are nested deeper than {} levels (Python's pickler cannot write them)",
                       kMaxDepth));
    }
    return depth;
  }
  void push(std::size_t start, Kind kind = Kind::kOther) {
    stack_.push_back({start, kind, nested_depth()});
  }

  // Handles one opcode; false after STOP.
  bool step(unsigned char op, std::size_t op_start) {
    const std::size_t here = out_.size();
    popped_depth_ = -1;
    switch (op) {
      case 0x80: le(1); copy(op_start); return true;                 // PROTO
      case '.':                                                      // STOP
        if (!marks_.empty() || stack_.size() != 1) {
          fail(fmt::format("STOP leaves {} items and {} MARKs, not one item", stack_.size(), marks_.size()));
        }
        pop();
        copy(op_start);
        return false;
      case '(': copy(op_start); marks_.push_back({stack_.size(), here}); return true;  // MARK
      case 'c': {                                                    // GLOBAL
        const std::size_t name = at_;
        skip_line();
        skip_line();
        for (const auto& g : kPythonOnly) {
          if (at_ - name == std::strlen(g.name) && std::memcmp(in_ + name, g.name, at_ - name) == 0) {
            python_only(g.what);
          }
        }
        if (at_ - name > 9 && std::memcmp(in_ + name, "__main__\n", 9) == 0) {
          python_only("an object of the class " +
                      std::string(in_ + name + 9, at_ - name - 10) + " defined in the saving script (__main__)");
        }
        if (at_ - name > 6 && std::memcmp(in_ + name, "numpy", 5) == 0 &&
            (in_[name + 5] == '\n' || in_[name + 5] == '.')) {
          python_only("a numpy value (an array, scalar or dtype)");
        }
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
        const uint32_t id = memo_id(op == 'q' ? 1 : 4);
        const Kind kind = top("BINPUT").kind;
        if (kind == Kind::kOrderedDictClass) {
          class_memo_.insert(id);
        } else if (kind == Kind::kEmptyArgs) {  // not emitted: nothing to memoize
          fail("collections.OrderedDict is used other than as OrderedDict()");
        } else {
          class_memo_.erase(id);
          memo_depth_[id] = stack_.back().depth;
          copy(op_start);
        }
        return true;
      }
      case 'h': case 'j': {                                          // BINGET, LONG_BINGET
        const uint32_t id = memo_id(op == 'h' ? 1 : 4);
        if (class_memo_.count(id)) {
          push(here, Kind::kOrderedDictClass);
        } else {
          copy(op_start);
          push(here);
          // As deep as the value was when it was memoized (a container
          // filled after that, through the memo, is not followed).
          const auto memo = memo_depth_.find(id);
          if (memo != memo_depth_.end()) stack_.back().depth = memo->second;
        }
        return true;
      }
      case ')':                                                      // EMPTY_TUPLE
        if (frame_size() > 0 && stack_.back().kind == Kind::kOrderedDictClass) {
          push(here, Kind::kEmptyArgs);
        } else {
          copy(op_start);
          push(here);
        }
        return true;
      case 'R': {                                                    // REDUCE
        if (frame_size() >= 2 && stack_.back().kind == Kind::kEmptyArgs &&
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
        if (target("BUILD").kind == Kind::kOrderedDict) {
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
      case 0x8a: {                                                   // LONG1
        // Python writes the fewest bytes (2**40: 6); libtorch reads exactly 8: sign-extend.
        const uint32_t n = le(1);
        need(n);
        if (n > 8) fail(fmt::format("an int of {} bytes does not fit in int64, libtorch's int", n));
        const bool negative = n > 0 && (static_cast<unsigned char>(in_[at_ + n - 1]) & 0x80) != 0;
        out_ += "\x8a\x08";
        out_.append(in_ + at_, n);
        out_.append(8 - n, negative ? '\xff' : '\0');
        at_ += n;
        push(here);
        return true;
      }
      case 0x8b: {                                                   // LONG4
        const uint32_t n = le(4);
        need(n);
        fail(fmt::format("an int of {} bytes (LONG4) does not fit in int64, libtorch's int", n));
      }
      case 'X': case 'T': case 'B': { const uint32_t n = le(4); need(n); at_ += n; break; }
      case 'U': case 'C': case 0x8c: { const uint32_t n = le(1); need(n); at_ += n; break; }
      case 'N': case 0x88: case 0x89: case '}': case ']': break;     // NONE, TRUE, FALSE, {}, []
      case 'I': case 'L': case 'F': case 'S': case 'V': skip_line(); break;
      // Opcodes that combine stack items.
      case 't': case 'l': case 'd': {                                // TUPLE, LIST, DICT
        const std::size_t start = pop_to_mark(op == 't' ? "TUPLE" : op == 'l' ? "LIST" : "DICT",
                                              op == 'd', false);
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
        (void)target("APPEND");
        out_ += 'e';
        return true;
      }
      case 's': {                                                    // SETITEM -> MARK .. SETITEMS
        pop();
        out_.insert(pop().start, 1, '(');
        (void)target("SETITEM");
        out_ += 'u';
        return true;
      }
      case 'e': case 'u':                                            // APPENDS, SETITEMS
        pop_to_mark(op == 'e' ? "APPENDS" : "SETITEMS", op == 'u', true);
        copy(op_start);
        return true;
      case 'Q': { const std::size_t start = pop().start; copy(op_start); push(start); return true; }  // BINPERSID
      case 0x81: { pop(); const std::size_t start = pop().start; copy(op_start); push(start); return true; }  // NEWOBJ
      case 0x8f: case 0x90: case 0x91:                               // EMPTY_SET, ADDITEMS, FROZENSET
        python_only("a Python set");                                 // (pickle protocol 4 and later)
      default:
        if (op >= 0x8c && op <= 0x98) {  // opcodes of pickle protocols 4 and 5
          core::raise<CheckpointError>(
              "'{}' was pickled with pickle protocol 4 or later, which libtorch does not read; in "
              "Python, save it again with torch.save's default protocol (pickle_protocol=2)",
              path_);
        }
        fail(fmt::format("unsupported opcode 0x{:02x}", op));
    }
    copy(op_start);
    push(here);
    return true;
  }

  const char* in_;
  std::size_t size_;
  const std::string& path_;
  std::size_t at_ = 0;
  std::string out_;
  std::vector<Item> stack_;
  std::vector<Mark> marks_;
  std::set<uint32_t> class_memo_;
  std::unordered_map<uint32_t, int> memo_depth_;
  int popped_depth_ = -1;  // deepest item the current opcode popped, -1: none
};

}  // namespace

std::string adapt_python_pickle(const char* pickle, std::size_t size, const std::string& path) {
  return Rewriter(pickle, size, path).run();
}

void check_pickle(const char* pickle, std::size_t size, const std::string& path) {
  (void)Rewriter(pickle, size, path).run();
}

void strip_pickle_state(const c10::IValue& value) {
  const c10::IValue key{std::string(kPickleStateKey)};
  for_each_value(value, [&](const c10::IValue& v) {
    if (v.isGenericDict()) (void)v.toGenericDict().erase(key);
  });
}

}  // namespace rankwise::checkpoint::pickle
