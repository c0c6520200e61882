// The file side of `llama2 batch`: reading the JSONL input, resuming from an existing output, and
// appending result lines so that a kill never leaves a partial line behind.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace llama2 {

// custom_ids of complete result lines already in `path` (missing file: empty). A trailing partial
// line (a job killed mid-write) is cut off the file so appending continues on a line boundary.
std::set<std::string> load_done_ids(const std::string& path);

// Appends one JSON object per line; each line goes out in one write and is flushed at once.
class ResultWriter {
 public:
  // append: keep existing lines (resume); otherwise the file must not exist or be empty, so a
  // finished job's results are never overwritten by accident.
  ResultWriter(const std::string& path, bool append);
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;
  void write(const nlohmann::json& line);

 private:
  std::string path_;
  int fd_ = -1;
};

// Progress on stderr: on a terminal one line rewritten in place (at most 5 times a second); when
// stderr is a file (Slurm logs) one plain line every `interval_s` seconds, never carriage returns.
class Progress {
 public:
  Progress(size_t total, double interval_s);
  void update(size_t done, size_t failed, uint64_t generated_tokens, bool final = false);

 private:
  size_t total_;
  double interval_s_;
  bool tty_;
  double start_, last_ = -1e9;
};

}  // namespace llama2
