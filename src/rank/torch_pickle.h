// The pickle of a PyTorch state dict (the data.pkl record of a torch.save zip), read without
// Python: a small pickle machine that knows only the opcodes and callables torch.save of a dict of
// tensors produces (rank/torch_file.h finds the tensors' bytes).
//
// Accepted: protocol 2 (torch.save's default); a top-level dict or collections.OrderedDict (whose
// BUILD state, the `_metadata` that Module.state_dict() attaches, is ignored) mapping names to
// tensors made by torch._utils._rebuild_tensor_v2 over a storage given by persistent id
// ('storage', torch.<T>Storage, key, location, numel); the opcodes MARK STOP PROTO GLOBAL REDUCE
// BUILD BINPERSID NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 BINUNICODE EMPTY_TUPLE
// TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_DICT SETITEM SETITEMS BINPUT LONG_BINPUT BINGET LONG_BINGET.
// Anything else (another opcode, protocol, global or callable, a value that is not a tensor) is
// refused naming it and where it is, since an arbitrary pickle can run arbitrary code in Python
// and means nothing to the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llama2 {

// One entry of the state dict as its pickle describes it.
struct PickledTensor {
  std::string name;           // the state dict key
  std::string storage_type;   // "HalfStorage", "BFloat16Storage", "FloatStorage", ...
  std::string storage_key;    // the record holding the storage's bytes: <archive>/data/<key>
  int64_t storage_numel = 0;  // elements in the storage
  int64_t offset = 0;         // the tensor's first element in the storage
  std::vector<int64_t> shape, stride;  // in elements
};

// The tensors of the state dict pickled in [data, data + size), in the dict's order. Error
// "<where>: ..." naming the refused opcode (and its byte offset), global, callable or key.
std::vector<PickledTensor> parse_state_dict_pickle(const uint8_t* data, size_t size,
                                                   const std::string& where);

}  // namespace llama2
