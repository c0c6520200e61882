// Reading PyTorch checkpoint files (torch.save of a state dict: Meta's consolidated.NN.pth,
// Hugging Face's pytorch_model*.bin) without Python.
//
// torch.save writes a zip archive (rank/zip_archive.h), stored uncompressed: <archive>/data.pkl, a
// pickle describing the dict and its tensors (rank/torch_pickle.h); <archive>/data/<key>, the raw
// little-endian bytes of each storage; <archive>/byteorder ("little"; absent in older files,
// which were little-endian too) and <archive>/version. A tensor is a view into a storage: an
// element offset, a shape and strides. The file is mmap'ed like a safetensors file, and each
// tensor becomes a TensorInfo whose byte range lies inside its storage's record, so a rank copies
// only its shard's bytes.
//
// Read: tensors of torch.float16, bfloat16 and float32 (HalfStorage, BFloat16Storage,
// FloatStorage) in row-major contiguous layout. Other storages (LongStorage, ...) parse, and are
// refused when read, naming the tensor; a non-contiguous view, a storage record of the wrong size
// or missing, a compressed or encrypted record, a big-endian file, and everything the pickle
// reader refuses give an Error naming the file and the tensor, record or opcode.
#pragma once

#include <string>

#include "rank/tensor_file.h"

namespace llama2 {

class TorchFile final : public TensorFile {
 public:
  explicit TorchFile(const std::string& path);
};

}  // namespace llama2
