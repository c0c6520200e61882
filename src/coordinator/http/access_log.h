// The HTTP front's operations log (docs/serving.md, "Operations"): one access line per request
// (`--access-log off|text|json`), the request id every line about a request carries
// (X-Request-Id), and the notes about a request (a replaced id, an ignored field, a key reload).
//
// Connection threads only fill an AccessRecord (numbers and the strings they already hold) and
// move it into a bounded queue; one writer thread formats and writes the lines. Formatting and
// the write(2) to stderr stay off the engine thread and off the connection threads' answers.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>

namespace llama2 {

enum class AccessLogFormat { kOff, kText, kJson };
// "off" / "text" / "json"; anything else: Error naming --access-log and the allowed values.
AccessLogFormat parse_access_log_format(const std::string& value);
const char* to_string(AccessLogFormat format);

// X-Request-Id as a client may give it: 1 to kMaxRequestIdChars of [A-Za-z0-9._:-] (vLLM and
// nginx's $request_id fit); such an id is used as given. A longer one up to
// kMaxRequestIdHeaderBytes, or one with another character, is replaced by a generated id (the
// note says why); past that the request is refused with 400 (a header that large is a broken
// client, not an id).
constexpr size_t kMaxRequestIdChars = 128;
constexpr size_t kMaxRequestIdHeaderBytes = 1024;
// "" when `id` is usable as given, else why not ("longer than 128 characters (got 300)",
// "character 0x22 at 5 is not one of [A-Za-z0-9._:-]").
std::string request_id_problem(const std::string& id);
// 32 hex digits, unique in this process (a random part and a counter).
std::string generate_request_id();

// One request as the access log reports it. Times are seconds; ttft_s < 0: no token.
struct AccessRecord {
  std::chrono::system_clock::time_point time;  // the request's arrival
  std::string request_id;
  std::string method;
  std::string route;  // the path as requested
  int status = 0;
  std::string model;  // the name the request gave ("" when none)
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  double ttft_s = -1;
  double total_s = 0;
  std::string client;  // "ADDRESS:PORT"
};

// The lines, exactly as written (also for tests). Strings are escaped: text lines quote them
// with \" \\ and \n, \r, \t, \xNN for the other control bytes; JSON lines are one JSON object
// (control characters as \u00NN, invalid UTF-8 replaced by U+FFFD).
std::string format_access_line(const AccessRecord& r, AccessLogFormat format);
// A note about request `request_id` (or none: ""), in the same format (text when off).
std::string format_note_line(const std::string& request_id, const std::string& note,
                             AccessLogFormat format);
// "2026-12-04T12:00:00.123Z".
std::string iso8601_utc(std::chrono::system_clock::time_point t);

class AccessLog {
 public:
  // Lines waiting for the writer beyond which new ones are dropped (counted, then reported).
  static constexpr size_t kMaxQueued = 65536;
  // Writes to file descriptor `fd` (stderr in serve); a thread of its own from here.
  explicit AccessLog(AccessLogFormat format, int fd = 2);
  ~AccessLog();  // writes what is queued, then joins
  AccessLogFormat format() const { return format_; }
  // A connection thread: one access line (nothing when the format is off).
  void record(AccessRecord&& r);
  // Any thread: one note line, written whatever the format.
  void note(std::string request_id, std::string note);
  uint64_t dropped() const;

 private:
  struct Note {
    std::string request_id, text;
  };
  using Entry = std::variant<AccessRecord, Note>;
  void push(Entry&& e);
  void run();
  const AccessLogFormat format_;
  const int fd_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  uint64_t dropped_ = 0, dropped_reported_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// HTTP responses by status, for /metrics (llama2_http_responses_total{status="200"}). Lock-free:
// one relaxed increment per response.
class StatusCounts {
 public:
  void count(int status);
  // The counter's HELP/TYPE and one line per status seen (in increasing order).
  std::string render() const;

 private:
  std::array<std::atomic<uint64_t>, 600> counts_{};  // 100-599; anything else counts as 0
};

}  // namespace llama2
