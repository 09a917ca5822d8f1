#include "checkpoint/pickle/pickle_value.h"

#include <cstring>
#include <unordered_map>

#include "checkpoint/pickle/limits.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::pickle {
namespace {

PickleRef make(PickleValue::Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

class Reader {
 public:
  Reader(const char* data, std::size_t size, const std::string& what)
      : data_(reinterpret_cast<const unsigned char*>(data)), size_(size), what_(what) {}

  PickleRef run() {
    while (true) {
      const std::size_t at = pos_;
      const unsigned char op = take(1)[0];
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME: a length hint
        case '.': {                 // STOP
          RANKWISE_CHECK(stack_.size() == 1 && marks_.empty(), CheckpointError,
                         "{} is not a valid pickle: {} values at STOP (byte {})", what_,
                         stack_.size(), at);
          return stack_.back();
        }
        case '(': marks_.push_back(stack_.size()); break;
        case '0': pop(); break;
        case '1': pop_mark(); break;
        case '2': push(top()); break;
        case 'N': push(make(PickleValue::Kind::kNone)); break;
        case 0x88: push_bool(true); break;
        case 0x89: push_bool(false); break;
        case 'J': { int32_t v; std::memcpy(&v, take(4), 4); push_int(v); break; }
        case 'K': push_int(take(1)[0]); break;
        case 'M': { const unsigned char* p = take(2); push_int(p[0] | p[1] << 8); break; }
        case 0x8a: push_long(take(1)[0]); break;           // LONG1
        case 0x8b: push_long(length(4)); break;            // LONG4
        case 'G': {                                          // BINFLOAT, big-endian
          const unsigned char* p = take(8);
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = bits << 8 | p[i];
          auto v = make(PickleValue::Kind::kFloat);
          std::memcpy(&v->real, &bits, 8);
          push(v);
          break;
        }
        case 'X': push_text(PickleValue::Kind::kString, length(4)); break;
        case 0x8c: push_text(PickleValue::Kind::kString, take(1)[0]); break;
        case 0x8d: push_text(PickleValue::Kind::kString, length(8)); break;
        case 'C': push_text(PickleValue::Kind::kBytes, take(1)[0]); break;
        case 'B': push_text(PickleValue::Kind::kBytes, length(4)); break;
        case 0x8e: push_text(PickleValue::Kind::kBytes, length(8)); break;
        case ')': push(container(PickleValue::Kind::kTuple, {})); break;
        case 't': push(container(PickleValue::Kind::kTuple, pop_mark())); break;
        case 0x85: push(container(PickleValue::Kind::kTuple, pop_n(1))); break;
        case 0x86: push(container(PickleValue::Kind::kTuple, pop_n(2))); break;
        case 0x87: push(container(PickleValue::Kind::kTuple, pop_n(3))); break;
        case ']': push(container(PickleValue::Kind::kList, {})); break;
        case 'l': push(container(PickleValue::Kind::kList, pop_mark())); break;
        case 0x8f: push(container(PickleValue::Kind::kList, {})); break;  // EMPTY_SET: as a list
        case 0x91: push(container(PickleValue::Kind::kList, pop_mark())); break;  // FROZENSET
        case 'a': extend(PickleValue::Kind::kList, pop_n(1)); break;   // APPEND
        case 'e': extend(PickleValue::Kind::kList, pop_mark()); break;  // APPENDS
        case 0x90: extend(PickleValue::Kind::kList, pop_mark()); break;  // ADDITEMS
        case '}': push(container(PickleValue::Kind::kDict, {})); break;
        case 'd': push(container(PickleValue::Kind::kDict, pairs(pop_mark()))); break;
        case 's': extend(PickleValue::Kind::kDict, pairs(pop_n(2))); break;   // SETITEM
        case 'u': extend(PickleValue::Kind::kDict, pairs(pop_mark())); break;  // SETITEMS
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line(), name = line();
          push_global(module + "." + name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop(), module = pop();
          RANKWISE_CHECK(name->kind == PickleValue::Kind::kString &&
                             module->kind == PickleValue::Kind::kString,
                         CheckpointError,
                         "{} is not a valid pickle: STACK_GLOBAL of non-strings (byte {})", what_,
                         at);
          push_global(module->text + "." + name->text);
          break;
        }
        case 'R': {  // REDUCE: callable(*args)
          auto args = pop(), callable = pop();
          push(object(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
          auto args = pop(), cls = pop();
          push(object(cls, args));
          break;
        }
        case 0x92: {  // NEWOBJ_EX: cls, args, kwargs
          pop();
          auto args = pop(), cls = pop();
          push(object(cls, args));
          break;
        }
        case 'b': {  // BUILD
          auto state = pop();
          auto target = top();
          RANKWISE_CHECK(
              target->kind == PickleValue::Kind::kObject && !target->state, CheckpointError,
              "{} is not a valid pickle: BUILD of a value that is not a new object (byte {})",
              what_, at);
          target->state = state;
          target->depth = std::max(target->depth, state->depth + 1);
          check_depth(target->depth);
          break;
        }
        case 'q': remember(take(1)[0]); break;
        case 'r': remember(length(4)); break;
        case 0x94: remember(memo_.size()); break;
        case 'h': recall(take(1)[0]); break;
        case 'j': recall(length(4)); break;
        case 'Q': {  // BINPERSID
          auto pid = container(PickleValue::Kind::kPersistentId, pop_n(1));
          push(pid);
          break;
        }
        default:
          core::raise<CheckpointError>(
              "{} is not a pickle rankwise reads: opcode 0x{:02x} at byte {}. It should be a file "
              "PyTorch's torch.save or torch.distributed.checkpoint wrote",
              what_, op, at);
      }
    }
  }

 private:
  [[noreturn]] void malformed(const std::string& why) {
    core::raise<CheckpointError>("{} is not a valid pickle: {} (byte {}). The file is damaged",
                                 what_, why, pos_);
  }
  const unsigned char* take(std::size_t n) {
    if (n > size_ - pos_) malformed("truncated");
    const unsigned char* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint64_t length(int bytes) {
    const unsigned char* p = take(static_cast<std::size_t>(bytes));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
    return v;
  }
  std::string line() {
    const void* end = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (end == nullptr) malformed("GLOBAL without its newline");
    std::size_t n = static_cast<const unsigned char*>(end) - (data_ + pos_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n + 1;
    return s;
  }
  void check_depth(int depth) {
    if (depth > kMaxDepth) malformed("values nested deeper than 1000 levels");
  }
  void push(PickleRef v) { stack_.push_back(std::move(v)); }
  PickleRef pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) malformed("stack underflow");
    auto v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const PickleRef& top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) malformed("stack underflow");
    return stack_.back();
  }
  std::vector<PickleRef> pop_n(std::size_t n) {
    std::vector<PickleRef> items(n);
    for (std::size_t i = n; i > 0; --i) items[i - 1] = pop();
    return items;
  }
  std::vector<PickleRef> pop_mark() {
    if (marks_.empty()) malformed("no MARK");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  std::vector<PickleRef> pairs(std::vector<PickleRef> items) {
    if (items.size() % 2 != 0) malformed("a dict item without its value");
    return items;
  }
  PickleRef container(PickleValue::Kind kind, std::vector<PickleRef> items) {
    auto v = make(kind);
    for (const auto& item : items) v->depth = std::max(v->depth, item->depth + 1);
    check_depth(v->depth);
    v->items = std::move(items);
    return v;
  }
  void extend(PickleValue::Kind kind, const std::vector<PickleRef>& items) {
    const auto& target = top();
    if (target->kind != kind) malformed("APPEND or SETITEM on a value of another type");
    for (const auto& item : items) {
      target->depth = std::max(target->depth, item->depth + 1);
      target->items.push_back(item);
    }
    check_depth(target->depth);
  }
  PickleRef object(const PickleRef& callable, const PickleRef& args) {
    if (args->kind != PickleValue::Kind::kTuple) malformed("REDUCE or NEWOBJ without an argument tuple");
    auto v = make(PickleValue::Kind::kObject);
    v->callable = callable;
    v->args = args;
    v->depth = std::max(callable->depth, args->depth) + 1;
    check_depth(v->depth);
    return v;
  }
  void push_bool(bool b) {
    auto v = make(PickleValue::Kind::kBool);
    v->boolean = b;
    push(v);
  }
  void push_int(int64_t i) {
    auto v = make(PickleValue::Kind::kInt);
    v->integer = i;
    push(v);
  }
  void push_long(uint64_t n) {  // little-endian two's complement, n bytes
    if (n > 8) malformed("an integer wider than 64 bits");
    const unsigned char* p = take(n);
    uint64_t bits = 0;
    for (uint64_t i = n; i > 0; --i) bits = bits << 8 | p[i - 1];
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) bits |= ~uint64_t{0} << (8 * n);  // sign-extend
    push_int(static_cast<int64_t>(bits));
  }
  void push_text(PickleValue::Kind kind, uint64_t n) {
    if (n > size_ - pos_) malformed("truncated");
    auto v = make(kind);
    const unsigned char* p = take(n);
    v->text.assign(reinterpret_cast<const char*>(p), n);
    push(v);
  }
  void push_global(std::string name) {
    auto v = make(PickleValue::Kind::kGlobal);
    v->text = std::move(name);
    push(v);
  }
  void remember(uint64_t index) {
    if (index >= kMaxMemo) malformed("memo index beyond 2^22");
    memo_[index] = top();
  }
  void recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) malformed("memo index never set");
    push(it->second);
  }

  const unsigned char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  const std::string& what_;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<uint64_t, PickleRef> memo_;
};

}  // namespace

PickleRef PickleValue::attribute(const std::string& name) const {
  if (kind != Kind::kObject || !state) return nullptr;
  // A dict, or (dict, slots) as objects with __slots__ pickle.
  const PickleValue* dict = state.get();
  if (dict->kind == Kind::kTuple && dict->items.size() == 2 && dict->items[0]) dict = dict->items[0].get();
  if (dict->kind != Kind::kDict) return nullptr;
  for (std::size_t i = 0; i + 1 < dict->items.size(); i += 2) {
    if (dict->items[i]->kind == Kind::kString && dict->items[i]->text == name) return dict->items[i + 1];
  }
  return nullptr;
}

const std::string& PickleValue::global_name() const {
  static const std::string empty;
  return kind == Kind::kGlobal ? text : empty;
}

PickleRef read_pickle(const char* data, std::size_t size, const std::string& what) {
  return Reader(data, size, what).run();
}

}  // namespace rankwise::checkpoint::pickle
