#include "rank/zip_archive.h"

#include "common/check.h"

namespace llama2 {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kEndSize = 22, kLocatorSize = 20, kZip64EndSize = 56;
constexpr uint64_t kCentralSize = 46, kLocalSize = 30;

// Little-endian reads from a range the caller has checked.
uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  // [at, at + n) inside the file, or Error naming `what`.
  const uint8_t* range(uint64_t at, uint64_t n, const std::string& what) const {
    if (at > size_ || n > size_ - at) {
      throw Error(path_ + ": zip " + what + " at byte " + std::to_string(at) + " (" +
                  std::to_string(n) + " bytes) lies outside the file of " + std::to_string(size_) +
                  " bytes (truncated?)");
    }
    return data_ + at;
  }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_;
  uint64_t size_;
  const std::string& path_;
};

struct Directory {
  uint64_t entries = 0, offset = 0, bytes = 0;
};

// The end-of-central-directory record, searched backwards over the longest possible comment.
uint64_t find_end_record(const Reader& r) {
  if (r.size() >= kEndSize) {
    const uint64_t lowest = r.size() > kEndSize + 0xffff ? r.size() - kEndSize - 0xffff : 0;
    const uint8_t* p = r.range(0, r.size(), "archive");
    for (uint64_t at = r.size() - kEndSize + 1; at-- > lowest;) {
      if (le(p + at, 4) == kEndOfDirectory && at + kEndSize + le(p + at + 20, 2) <= r.size()) {
        return at;
      }
    }
  }
  throw Error(r.path() +
              ": not a zip archive (no end-of-central-directory record): truncated, or not a "
              "PyTorch checkpoint; PyTorch's legacy pre-1.6 format is not read (re-save it with a "
              "current torch.save)");
}

Directory read_directory(const Reader& r) {
  const uint64_t end_at = find_end_record(r);
  const uint8_t* end = r.range(end_at, kEndSize, "end-of-central-directory record");
  Directory d{le(end + 10, 2), le(end + 16, 4), le(end + 12, 4)};
  const bool zip64 = d.entries == 0xffff || d.offset == 0xffffffff || d.bytes == 0xffffffff;
  if (end_at >= kLocatorSize &&
      le(r.range(end_at - kLocatorSize, 4, "record"), 4) == kZip64Locator) {
    const uint8_t* loc = r.range(end_at - kLocatorSize, kLocatorSize, "ZIP64 locator");
    const uint64_t z_at = le(loc + 8, 8);
    const uint8_t* z = r.range(z_at, kZip64EndSize, "ZIP64 end-of-central-directory record");
    if (le(z, 4) != kZip64EndOfDirectory) {
      throw Error(r.path() + ": the ZIP64 locator points at byte " + std::to_string(z_at) +
                  ", which holds no ZIP64 end-of-central-directory record");
    }
    d = Directory{le(z + 32, 8), le(z + 48, 8), le(z + 40, 8)};
  } else if (zip64) {
    throw Error(r.path() +
                ": the end-of-central-directory record asks for ZIP64 values, but no "
                "ZIP64 locator precedes it");
  }
  r.range(d.offset, d.bytes, "central directory");
  return d;
}

// The 64-bit values a ZIP64 extra field holds for the 32-bit fields set to all ones, in the
// order the format fixes: uncompressed size, compressed size, local header offset.
void apply_zip64_extra(const uint8_t* extra, uint64_t n, uint64_t* usize, uint64_t* csize,
                       uint64_t* local, const std::string& where) {
  for (uint64_t at = 0; at + 4 <= n;) {
    const uint64_t id = le(extra + at, 2), len = le(extra + at + 2, 2);
    if (at + 4 + len > n) break;
    if (id == kZip64ExtraId) {
      const uint8_t* v = extra + at + 4;
      uint64_t used = 0;
      for (uint64_t* field : {usize, csize, local}) {
        if (*field != 0xffffffff) continue;
        if (used + 8 > len) throw Error(where + ": ZIP64 extra field is too short");
        *field = le(v + used, 8);
        used += 8;
      }
      return;
    }
    at += 4 + len;
  }
  if (*usize == 0xffffffff || *csize == 0xffffffff || *local == 0xffffffff) {
    throw Error(where + ": sizes or offset need a ZIP64 extra field, and it has none");
  }
}

}  // namespace

std::vector<ZipEntry> read_zip_directory(const uint8_t* data, uint64_t size,
                                         const std::string& path) {
  const Reader r(data, size, path);
  const Directory d = read_directory(r);
  std::vector<ZipEntry> out;
  uint64_t at = d.offset;
  for (uint64_t i = 0; i < d.entries; ++i) {
    const uint8_t* c = r.range(at, kCentralSize, "central directory entry");
    if (le(c, 4) != kCentralHeader) {
      throw Error(path + ": zip central directory entry " + std::to_string(i) + " at byte " +
                  std::to_string(at) + " has a bad signature (corrupt archive)");
    }
    const uint64_t name_len = le(c + 28, 2), extra_len = le(c + 30, 2), comment_len = le(c + 32, 2);
    const uint8_t* tail =
        r.range(at + kCentralSize, name_len + extra_len + comment_len, "central directory entry");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(tail), name_len);
    e.flags = static_cast<uint16_t>(le(c + 8, 2));
    e.method = static_cast<uint16_t>(le(c + 10, 2));
    uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), local = le(c + 42, 4);
    const std::string where = path + ": zip entry '" + e.name + "'";
    apply_zip64_extra(tail + name_len, extra_len, &usize, &csize, &local, where);
    // The local header repeats the name and may carry its own extra field (torch pads there to
    // align the data): the data starts after both.
    const uint8_t* l = r.range(local, kLocalSize, "local header of '" + e.name + "'");
    if (le(l, 4) != kLocalHeader) {
      throw Error(where + ": no local header at byte " + std::to_string(local));
    }
    e.data_offset = local + kLocalSize + le(l + 26, 2) + le(l + 28, 2);
    e.size = csize;
    e.uncompressed_size = usize;
    r.range(e.data_offset, e.size, "data of '" + e.name + "'");
    out.push_back(std::move(e));
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  return out;
}

}  // namespace llama2
