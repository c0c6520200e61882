// The HTTP front's API keys: --api-key (or $LLAMA2_API_KEY) and the keys of --api-key-file (or
// $LLAMA2_API_KEY_FILE), one per line, re-read when serve gets SIGUSR2 (docs/serving.md,
// "Operations"). A request is let in when its bearer token is any of them; every key is compared,
// in constant time, whichever matches.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llama2 {

// The keys of a key file's text: one per line, surrounding blanks trimmed (a CR of a CRLF file
// too); blank lines and lines starting with '#' are skipped. A key with a blank or a control
// character inside is refused (Error naming the line): it could not be sent in a header as written.
std::vector<std::string> parse_api_keys(const std::string& text, const std::string& path);

class ApiKeys {
 public:
  // `fixed`: --api-key ("" none); `file`: --api-key-file ("" none). Error when the file cannot
  // be read or holds no key (a server that starts must have the keys it was given).
  ApiKeys(std::string fixed, std::string file);
  bool required() const;  // any key is set: requests must present one
  bool matches(const std::string& presented) const;
  const std::string& file() const { return file_; }
  // Re-reads the file; what happened, for the log: "N keys loaded from FILE", or, when the file
  // cannot be read or holds no key, why, with the old keys kept.
  std::string reload();

 private:
  const std::string fixed_, file_;
  mutable std::mutex mu_;
  // Replaced as a whole by reload(); matches() compares against the snapshot it took.
  std::shared_ptr<const std::vector<std::string>> keys_;
};

// The self-pipe of SIGUSR2: the signal handler only writes one byte to write_fd(); a thread of
// its own reads it and reloads the keys (file reads, allocation and logging are not
// async-signal-safe), reporting through `report` (the access log's notes).
class KeyReloader {
 public:
  KeyReloader(ApiKeys& keys, std::function<void(const std::string&)> report);
  ~KeyReloader();  // stops and joins the thread
  int write_fd() const { return fds_[1]; }

 private:
  void run();
  ApiKeys& keys_;
  std::function<void(const std::string&)> report_;
  int fds_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace llama2
