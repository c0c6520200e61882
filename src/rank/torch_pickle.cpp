#include "rank/torch_pickle.h"

#include <cstdio>
#include <map>
#include <memory>
#include <unordered_map>

#include "common/check.h"

namespace llama2 {
namespace {

// The values a state dict pickle builds. A Value is shared by the stack and the memo, as Python
// objects are (a memoized dict filled later by SETITEMS is the same dict).
struct Value;
using Ref = std::shared_ptr<Value>;
enum class Kind { kNone, kBool, kInt, kString, kTuple, kDict, kGlobal, kStorage, kTensor };
struct Value {
  Kind kind = Kind::kNone;
  int64_t i = 0;           // kInt, kBool; kStorage: its numel
  std::string s;           // kString; kGlobal: "module.name"; kStorage: its key
  std::string type;        // kStorage: "HalfStorage", ...
  std::vector<Ref> items;  // kTuple; kDict: key, value, key, value, ...
  PickledTensor tensor;    // kTensor (name filled when the dict is read)
};

Ref make(Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "a bool";
    case Kind::kInt:
      return "an int";
    case Kind::kString:
      return "a str";
    case Kind::kTuple:
      return "a tuple";
    case Kind::kDict:
      return "a dict";
    case Kind::kGlobal:
      return "a global";
    case Kind::kStorage:
      return "a storage";
    case Kind::kTensor:
      return "a tensor";
  }
  return "?";
}

// Names of pickle opcodes outside the subset, so a refusal says what it met.
std::string opcode_name(uint8_t op) {
  static const std::map<uint8_t, const char*> names = {{']', "EMPTY_LIST"},
                                                       {'a', "APPEND"},
                                                       {'e', "APPENDS"},
                                                       {'l', "LIST"},
                                                       {'G', "BINFLOAT"},
                                                       {'F', "FLOAT"},
                                                       {'I', "INT"},
                                                       {'L', "LONG"},
                                                       {'S', "STRING"},
                                                       {'T', "BINSTRING"},
                                                       {'U', "SHORT_BINSTRING"},
                                                       {'V', "UNICODE"},
                                                       {'B', "BINBYTES"},
                                                       {'C', "SHORT_BINBYTES"},
                                                       {'P', "PERSID"},
                                                       {'i', "INST"},
                                                       {'o', "OBJ"},
                                                       {'d', "DICT"},
                                                       {'p', "PUT"},
                                                       {'g', "GET"},
                                                       {'0', "POP"},
                                                       {'1', "POP_MARK"},
                                                       {'2', "DUP"},
                                                       {0x81, "NEWOBJ"},
                                                       {0x82, "EXT1"},
                                                       {0x83, "EXT2"},
                                                       {0x84, "EXT4"},
                                                       {0x8b, "LONG4"},
                                                       {0x8c, "SHORT_BINUNICODE"},
                                                       {0x8d, "BINUNICODE8"},
                                                       {0x8e, "BINBYTES8"},
                                                       {0x8f, "EMPTY_SET"},
                                                       {0x90, "ADDITEMS"},
                                                       {0x91, "FROZENSET"},
                                                       {0x92, "NEWOBJ_EX"},
                                                       {0x93, "STACK_GLOBAL"},
                                                       {0x94, "MEMOIZE"},
                                                       {0x95, "FRAME"},
                                                       {0x96, "BYTEARRAY8"},
                                                       {0x97, "NEXT_BUFFER"},
                                                       {0x98, "READONLY_BUFFER"}};
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  auto it = names.find(op);
  return it == names.end() ? std::string("unknown opcode ") + hex
                           : std::string(it->second) + " (" + hex + ")";
}

// Storage classes torch.save names (torch.<T>Storage); the engine reads the first three.
bool known_storage(const std::string& name) {
  static const char* const kNames[] = {
      "HalfStorage",          "BFloat16Storage",   "FloatStorage",        "DoubleStorage",
      "LongStorage",          "IntStorage",        "ShortStorage",        "CharStorage",
      "ByteStorage",          "BoolStorage",       "ComplexFloatStorage", "ComplexDoubleStorage",
      "Float8_e4m3fnStorage", "Float8_e5m2Storage"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

class Machine {
 public:
  Machine(const uint8_t* data, size_t size, const std::string& where)
      : p_(data), n_(size), where_(where) {}

  Ref run() {
    for (;;) {
      op_at_ = at_;
      const uint8_t op = byte();
      if (op == '.') break;  // STOP
      step(op);
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail("STOP leaves " + std::to_string(stack_.size()) + " values on the stack; expected 1");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(where_ + ": byte " + std::to_string(op_at_) + ": " + why);
  }
  uint64_t take(int bytes) {
    if (n_ - at_ < static_cast<size_t>(bytes))
      fail("truncated pickle (an opcode needs more bytes)");
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p_[at_ + i];
    at_ += bytes;
    return v;
  }
  uint8_t byte() { return static_cast<uint8_t>(take(1)); }
  std::string line() {
    size_t end = at_;
    while (end < n_ && p_[end] != '\n') ++end;
    if (end == n_) fail("truncated pickle (GLOBAL without its newline)");
    std::string s(reinterpret_cast<const char*>(p_ + at_), end - at_);
    at_ = end + 1;
    return s;
  }
  Ref pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      fail("pickle stack underflow (corrupt data.pkl)");
    }
    Ref v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<Ref> pop_to_mark() {
    if (marks_.empty()) fail("no MARK for this opcode (corrupt data.pkl)");
    std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()),
                           stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void push(Ref v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t i) {
    Ref v = make(Kind::kInt);
    v->i = i;
    push(v);
  }

  void step(uint8_t op);
  void push_literal(uint8_t op);
  void global();
  void reduce();
  void persistent_id();
  void set_items(std::vector<Ref> kv);
  void memo_put(uint64_t key) {
    if (stack_.empty()) fail("memo PUT on an empty stack");
    memo_[key] = stack_.back();
  }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo GET of key " + std::to_string(key) + " that was never PUT");
    push(it->second);
  }
  Ref tuple_of(std::vector<Ref> items) {
    Ref t = make(Kind::kTuple);
    t->items = std::move(items);
    return t;
  }
  PickledTensor rebuild_tensor(const std::vector<Ref>& args);
  std::vector<int64_t> ints(const Ref& v, const char* what);

  const uint8_t* p_;
  size_t n_, at_ = 0, op_at_ = 0;
  const std::string& where_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
};

void Machine::step(uint8_t op) {
  switch (op) {
    case 0x80:  // PROTO
      if (const uint8_t v = byte(); v != 2) {
        fail("pickle protocol " + std::to_string(v) +
             "; torch.save writes protocol 2 (its default), the only one read here");
      }
      return;
    case '(':  // MARK
      marks_.push_back(stack_.size());
      return;
    case 'c':  // GLOBAL
      return global();
    case 'R':  // REDUCE
      return reduce();
    case 'Q':  // BINPERSID
      return persistent_id();
    case 'b': {  // BUILD: a dict's instance state (the state dict's _metadata): not needed
      pop();
      if (stack_.empty() || stack_.back()->kind != Kind::kDict)
        fail("BUILD on something not a dict");
      return;
    }
    case ')':  // EMPTY_TUPLE
      return push(tuple_of({}));
    case 't':  // TUPLE
      return push(tuple_of(pop_to_mark()));
    case 0x85:    // TUPLE1
    case 0x86:    // TUPLE2
    case 0x87: {  // TUPLE3
      std::vector<Ref> items(op - 0x84);
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      return push(tuple_of(std::move(items)));
    }
    case '}':  // EMPTY_DICT
      return push(make(Kind::kDict));
    case 's': {  // SETITEM
      Ref v = pop();
      Ref k = pop();
      return set_items({k, v});
    }
    case 'u':  // SETITEMS
      return set_items(pop_to_mark());
    case 'q':  // BINPUT
      return memo_put(take(1));
    case 'r':  // LONG_BINPUT
      return memo_put(take(4));
    case 'h':  // BINGET
      return memo_get(take(1));
    case 'j':  // LONG_BINGET
      return memo_get(take(4));
    default:
      return push_literal(op);
  }
}

// The opcodes that push a value read from the stream: None, booleans, integers, strings.
void Machine::push_literal(uint8_t op) {
  switch (op) {
    case 'N':
      return push(make(Kind::kNone));
    case 0x88:    // NEWTRUE
    case 0x89: {  // NEWFALSE
      Ref v = make(Kind::kBool);
      v->i = op == 0x88;
      return push(v);
    }
    case 'J':  // BININT: signed 32-bit
      return push_int(static_cast<int32_t>(static_cast<uint32_t>(take(4))));
    case 'K':  // BININT1
      return push_int(static_cast<int64_t>(take(1)));
    case 'M':  // BININT2
      return push_int(static_cast<int64_t>(take(2)));
    case 0x8a: {  // LONG1: n bytes, little-endian two's complement
      const int len = byte();
      if (len > 8) fail("LONG1 of " + std::to_string(len) + " bytes does not fit 64 bits");
      uint64_t u = len ? take(len) : 0;
      if (len > 0 && len < 8 && (u >> (8 * len - 1)) & 1) u |= ~uint64_t{0} << (8 * len);
      return push_int(static_cast<int64_t>(u));
    }
    case 'X': {  // BINUNICODE
      const uint64_t len = take(4);
      if (len > n_ - at_) fail("truncated pickle (a string runs past the end)");
      Ref v = make(Kind::kString);
      v->s.assign(reinterpret_cast<const char*>(p_ + at_), len);
      at_ += len;
      return push(v);
    }
    default:
      fail("pickle opcode " + opcode_name(op) +
           " is outside the subset torch.save of a state dict produces");
  }
}

void Machine::global() {
  const std::string module = line(), name = line();
  const bool allowed = (module == "collections" && name == "OrderedDict") ||
                       (module == "torch._utils" && name == "_rebuild_tensor_v2") ||
                       (module == "torch" && known_storage(name));
  if (!allowed) {
    fail("global '" + module + "." + name +
         "' is not allowed (a state dict needs only collections.OrderedDict, "
         "torch._utils._rebuild_tensor_v2 and torch.<T>Storage)");
  }
  Ref g = make(Kind::kGlobal);
  g->s = module + "." + name;
  push(g);
}

void Machine::set_items(std::vector<Ref> kv) {
  if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values");
  if (stack_.empty() || stack_.back()->kind != Kind::kDict)
    fail("SETITEM(S) on something not a dict");
  std::vector<Ref>& items = stack_.back()->items;
  items.insert(items.end(), kv.begin(), kv.end());
}

void Machine::persistent_id() {
  const Ref pid = pop();
  const auto& t = pid->items;
  if (pid->kind != Kind::kTuple || t.size() != 5 || t[0]->kind != Kind::kString ||
      t[0]->s != "storage" || t[1]->kind != Kind::kGlobal || t[1]->s.rfind("torch.", 0) != 0 ||
      t[2]->kind != Kind::kString || t[4]->kind != Kind::kInt || t[4]->i < 0) {
    fail("persistent id is not ('storage', torch.<T>Storage, key, location, numel)");
  }
  Ref s = make(Kind::kStorage);
  s->type = t[1]->s.substr(6);
  s->s = t[2]->s;
  s->i = t[4]->i;
  push(s);
}

std::vector<int64_t> Machine::ints(const Ref& v, const char* what) {
  if (v->kind != Kind::kTuple) fail(std::string("_rebuild_tensor_v2: ") + what + " is not a tuple");
  std::vector<int64_t> out;
  for (const Ref& x : v->items) {
    if (x->kind != Kind::kInt)
      fail(std::string("_rebuild_tensor_v2: ") + what + " holds " + kind_name(x->kind) +
           ", not ints");
    out.push_back(x->i);
  }
  return out;
}

// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// backward_hooks[, metadata]).
PickledTensor Machine::rebuild_tensor(const std::vector<Ref>& a) {
  if (a.size() != 6 && a.size() != 7) {
    fail("_rebuild_tensor_v2 with " + std::to_string(a.size()) + " arguments; expected 6 or 7");
  }
  if (a[0]->kind != Kind::kStorage) fail("_rebuild_tensor_v2: argument 1 is not a storage");
  if (a[1]->kind != Kind::kInt) fail("_rebuild_tensor_v2: storage offset is not an int");
  if (a[5]->kind != Kind::kDict || !a[5]->items.empty()) {
    fail("_rebuild_tensor_v2: backward hooks must be an empty dict");
  }
  if (a.size() == 7 && a[6]->kind != Kind::kNone &&
      !(a[6]->kind == Kind::kDict && a[6]->items.empty())) {
    fail("_rebuild_tensor_v2: tensor metadata (a subclass or a special tensor) is not read");
  }
  PickledTensor t;
  t.storage_type = a[0]->type;
  t.storage_key = a[0]->s;
  t.storage_numel = a[0]->i;
  t.offset = a[1]->i;
  t.shape = ints(a[2], "size");
  t.stride = ints(a[3], "stride");
  return t;
}

void Machine::reduce() {
  const Ref args = pop();
  const Ref fn = pop();
  if (fn->kind != Kind::kGlobal || args->kind != Kind::kTuple) {
    fail("REDUCE of " + std::string(kind_name(fn->kind)) + " with " + kind_name(args->kind));
  }
  if (fn->s == "collections.OrderedDict") {
    if (!args->items.empty()) fail("OrderedDict called with arguments");
    return push(make(Kind::kDict));
  }
  if (fn->s == "torch._utils._rebuild_tensor_v2") {
    Ref t = make(Kind::kTensor);
    t->tensor = rebuild_tensor(args->items);
    return push(t);
  }
  fail("REDUCE calls '" + fn->s + "', which builds no state dict value");
}

}  // namespace

std::vector<PickledTensor> parse_state_dict_pickle(const uint8_t* data, size_t size,
                                                   const std::string& where) {
  const Ref root = Machine(data, size, where).run();
  if (root->kind != Kind::kDict) {
    throw Error(where + ": the pickle holds " + kind_name(root->kind) +
                ", not a state dict (a dict of tensors)");
  }
  std::vector<PickledTensor> out;
  std::map<std::string, size_t> index;  // a repeated key replaces the value, as in a Python dict
  const auto& items = root->items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind != Kind::kString) {
      throw Error(where + ": state dict key " + std::to_string(i / 2) + " is " +
                  kind_name(items[i]->kind) + ", not a str");
    }
    const std::string& key = items[i]->s;
    if (items[i + 1]->kind != Kind::kTensor) {
      throw Error(where + ": state dict entry '" + key + "' is " + kind_name(items[i + 1]->kind) +
                  ", not a tensor");
    }
    PickledTensor t = items[i + 1]->tensor;
    t.name = key;
    auto [it, fresh] = index.emplace(key, out.size());
    if (fresh) {
      out.push_back(std::move(t));
    } else {
      out[it->second] = std::move(t);
    }
  }
  return out;
}

}  // namespace llama2
