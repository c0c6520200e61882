// The directory of a zip archive held in memory (a PyTorch checkpoint is one: rank/torch_file.h).
// Only what torch.save writes is needed: entries stored uncompressed, located through the central
// directory, with ZIP64 records when the archive or an entry passes 4 GB (torch writes them for
// every file). Nothing is decompressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llama2 {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // first byte of the entry's data in the archive
  uint64_t size = 0;         // bytes of data as stored (compressed size)
  uint64_t uncompressed_size = 0;
  uint16_t method = 0;  // 0: stored; anything else is compressed
  uint16_t flags = 0;   // bit 0: encrypted
};

// The entries of the archive at [data, data + size), in central-directory order. Error naming
// `path` when there is no end-of-central-directory record (not a zip, or truncated), or a record
// or an entry's data lies outside the file.
std::vector<ZipEntry> read_zip_directory(const uint8_t* data, uint64_t size,
                                         const std::string& path);

}  // namespace llama2
