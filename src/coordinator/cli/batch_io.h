// The file side of `llama2 batch`: reading the JSONL input, resuming from an existing output, and
// appending result lines so that a kill never leaves a partial line behind.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace llama2 {

// The input lines an existing output file already answers, for --resume.
struct DoneLines {
  std::set<std::string> ids;  // custom_ids answered (each the first input line with that id)
  std::set<size_t> lines;     // 1-based numbers of input lines answered without a custom_id to
                              // match: invalid JSON, no string custom_id, a repeated custom_id
  size_t errors = 0;          // error lines among all of them
};

// Reads the complete lines of `path` (missing file: nothing done). A trailing partial line (a job
// killed mid-write) is cut off the file so appending continues on a line boundary. An output line
// answers its custom_id when it has one (a string) and is not a duplicate_custom_id error, else
// the input line named by its "line" field (every error line has one). Keying the lines that have
// no usable custom_id by line number is what makes resuming idempotent for them: matched by
// custom_id they matched nothing and were answered again on every resume, and a duplicate's
// error line claimed the id of the line it repeats.
DoneLines load_done(const std::string& path);

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
