#include "coordinator/cli/batch_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/check.h"

namespace llama2 {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

DoneLines load_done(const std::string& path) {
  DoneLines done;
  std::ifstream in(path, std::ios::binary);
  if (!in) return done;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  const size_t complete = all.rfind('\n') == std::string::npos ? 0 : all.rfind('\n') + 1;
  if (complete != all.size()) {
    if (::truncate(path.c_str(), static_cast<off_t>(complete)) != 0) {
      throw Error(path + ": cannot cut the partial last line: " + std::strerror(errno));
    }
  }
  std::istringstream lines(all.substr(0, complete));
  std::string line;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    // Error lines count as done too: the same input line would fail the same way again.
    const auto error = j.find("error");
    const bool is_error = error != j.end();
    const bool duplicate = is_error && error->is_object() &&
                           error->value("code", nlohmann::json()) == "duplicate_custom_id";
    const auto id = j.find("custom_id");
    const auto line_no = j.find("line");
    if (id != j.end() && id->is_string() && !duplicate) {
      done.ids.insert(id->get<std::string>());
    } else if (line_no != j.end() && line_no->is_number_unsigned()) {
      done.lines.insert(line_no->get<size_t>());
    } else {
      continue;  // not a line this command writes
    }
    done.errors += is_error;
  }
  return done;
}

ResultWriter::ResultWriter(const std::string& path, bool append) : path_(path) {
  struct stat st {};
  if (!append && ::stat(path.c_str(), &st) == 0 && st.st_size > 0) {
    throw Error("--output " + path +
                " already has results; pass --resume to continue that job "
                "or choose another file");
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("--output " + path + ": cannot open: " + std::strerror(errno));
}

ResultWriter::~ResultWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultWriter::write(const nlohmann::json& line) {
  // One write(2) per line on an O_APPEND descriptor: a kill lands before or after the line, and
  // nothing buffers it in user space.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("--output " + path_ + ": write failed: " + std::strerror(errno));
    off += static_cast<size_t>(n);
  }
}

Progress::Progress(size_t total, double interval_s)
    : total_(total), interval_s_(interval_s), tty_(::isatty(STDERR_FILENO) != 0), start_(now_s()) {}

void Progress::update(size_t done, size_t failed, uint64_t generated_tokens, bool final) {
  const double t = now_s();
  if (!final && t - last_ < (tty_ ? 0.2 : interval_s_)) return;
  last_ = t;
  const double elapsed = t - start_;
  const double tps = elapsed > 0 ? generated_tokens / elapsed : 0.0;
  char eta[32] = "-";
  if (done > 0 && done < total_) {
    std::snprintf(eta, sizeof(eta), "%.0fs", elapsed / done * (total_ - done));
  } else if (done >= total_) {
    std::snprintf(eta, sizeof(eta), "0s");
  }
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "batch: %zu/%zu prompts done (%zu failed), %llu tokens, %.1f tok/s, elapsed %.0fs, ETA %s",
      done, total_, failed, static_cast<unsigned long long>(generated_tokens), tps, elapsed, eta);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

}  // namespace llama2
