#include "coordinator/http/access_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>

#include "common/check.h"

namespace llama2 {

using nlohmann::json;

AccessLogFormat parse_access_log_format(const std::string& value) {
  if (value == "off") return AccessLogFormat::kOff;
  if (value == "text") return AccessLogFormat::kText;
  if (value == "json") return AccessLogFormat::kJson;
  throw Error("--access-log must be off, text or json (got \"" + value + "\")");
}

const char* to_string(AccessLogFormat format) {
  switch (format) {
    case AccessLogFormat::kOff:
      return "off";
    case AccessLogFormat::kText:
      return "text";
    case AccessLogFormat::kJson:
      return "json";
  }
  return "?";
}

std::string request_id_problem(const std::string& id) {
  if (id.empty()) return "empty";
  if (id.size() > kMaxRequestIdChars) {
    return "longer than " + std::to_string(kMaxRequestIdChars) + " characters (got " +
           std::to_string(id.size()) + ")";
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) {
      char b[80];
      std::snprintf(b, sizeof(b), "character 0x%02x at %zu is not one of [A-Za-z0-9._:-]", c, i);
      return b;
    }
  }
  return "";
}

std::string generate_request_id() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 gen(std::random_device{}());
  char b[40];
  std::snprintf(b, sizeof(b), "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return b;
}

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t s = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char b[96];  // room for any int the compiler assumes; the date itself takes 24
  std::snprintf(b, sizeof(b), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return b;
}

namespace {

// A client's string in a text line: always quoted, so that a space or a quote inside cannot
// shift the fields a log parser splits on.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\x%02x", c);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Milliseconds with 0.1 ms resolution.
double ms(double seconds) {
  return static_cast<double>(static_cast<int64_t>(seconds * 10000.0 + 0.5)) / 10.0;
}

std::string ms_text(double seconds) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f", ms(seconds));
  return b;
}

}  // namespace

std::string format_access_line(const AccessRecord& r, AccessLogFormat format) {
  if (format == AccessLogFormat::kJson) {
    const json j = {{"time", iso8601_utc(r.time)},
                    {"request_id", r.request_id},
                    {"method", r.method},
                    {"route", r.route},
                    {"status", r.status},
                    {"model", r.model},
                    {"prompt_tokens", r.prompt_tokens},
                    {"completion_tokens", r.completion_tokens},
                    {"cached_tokens", r.cached_tokens},
                    {"ttft_ms", r.ttft_s < 0 ? json(nullptr) : json(ms(r.ttft_s))},
                    {"total_ms", ms(r.total_s)},
                    {"client", r.client}};
    return dump(j) + "\n";
  }
  return iso8601_utc(r.time) + " request_id=" + quoted(r.request_id) +
         " client=" + quoted(r.client) + " " + quoted(r.method + " " + r.route) + " " +
         std::to_string(r.status) + " model=" + quoted(r.model) +
         " prompt_tokens=" + std::to_string(r.prompt_tokens) +
         " completion_tokens=" + std::to_string(r.completion_tokens) +
         " cached_tokens=" + std::to_string(r.cached_tokens) +
         " ttft_ms=" + (r.ttft_s < 0 ? std::string("-") : ms_text(r.ttft_s)) +
         " total_ms=" + ms_text(r.total_s) + "\n";
}

std::string format_note_line(const std::string& request_id, const std::string& note,
                             AccessLogFormat format) {
  const auto now = std::chrono::system_clock::now();
  if (format == AccessLogFormat::kJson) {
    json j = {{"time", iso8601_utc(now)}, {"note", note}};
    if (!request_id.empty()) j["request_id"] = request_id;
    return dump(j) + "\n";
  }
  return iso8601_utc(now) + " llama2 serve: HTTP: " +
         (request_id.empty() ? "" : "request_id=" + quoted(request_id) + " ") + quoted(note) + "\n";
}

AccessLog::AccessLog(AccessLogFormat format, int fd)
    : format_(format), fd_(fd), thread_([this] { run(); }) {}

AccessLog::~AccessLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void AccessLog::record(AccessRecord&& r) {
  if (format_ == AccessLogFormat::kOff) return;
  push(Entry(std::move(r)));
}

void AccessLog::note(std::string request_id, std::string text) {
  push(Entry(Note{std::move(request_id), std::move(text)}));
}

uint64_t AccessLog::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void AccessLog::push(Entry&& e) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= kMaxQueued) {
      ++dropped_;
      return;
    }
    wake = queue_.empty();  // the writer sleeps only on an empty queue
    queue_.push_back(std::move(e));
  }
  if (wake) cv_.notify_one();
}

void AccessLog::run() {
  std::deque<Entry> batch;
  for (;;) {
    uint64_t newly_dropped = 0;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      batch.swap(queue_);
      newly_dropped = dropped_ - dropped_reported_;
      dropped_reported_ = dropped_;
      stopping = stop_;
    }
    std::string out;
    for (const Entry& e : batch) {
      if (const auto* r = std::get_if<AccessRecord>(&e)) {
        out += format_access_line(*r, format_);
      } else {
        const Note& n = std::get<Note>(e);
        out += format_note_line(n.request_id, n.text, format_);
      }
    }
    if (newly_dropped > 0) {
      out += format_note_line("",
                              std::to_string(newly_dropped) +
                                  " log lines dropped: the log could not be written fast enough",
                              format_);
    }
    batch.clear();
    for (size_t done = 0; done < out.size();) {  // one write(2) per batch, whatever its size
      const ssize_t n = ::write(fd_, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // stderr closed: nothing else can be done with the lines
      done += static_cast<size_t>(n);
    }
    if (stopping) {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
    }
  }
}

void StatusCounts::count(int status) {
  const size_t i = status >= 100 && status < 600 ? static_cast<size_t>(status) : 0;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
}

std::string StatusCounts::render() const {
  std::string out =
      "# HELP llama2_http_responses_total HTTP responses by status (0: outside 100-599).\n"
      "# TYPE llama2_http_responses_total counter\n";
  for (size_t i = 0; i < counts_.size(); ++i) {
    const uint64_t n = counts_[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    out += "llama2_http_responses_total{status=\"" + std::to_string(i) + "\"} " +
           std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace llama2
