#include "coordinator/http/api_keys.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/check.h"
#include "coordinator/http/http_front.h"

namespace llama2 {

std::vector<std::string> parse_api_keys(const std::string& text, const std::string& path) {
  std::vector<std::string> keys;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    const std::string key = line.substr(b, e - b + 1);
    for (const char ch : key) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c == 0x7f) {
        throw Error(path + ":" + std::to_string(n) +
                    ": a key holds a blank or a control character (one key per line, "
                    "# for comments)");
      }
    }
    keys.push_back(key);
  }
  return keys;
}

namespace {

// The file's keys; Error saying why there are none.
std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path + " (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) throw Error("cannot read " + path + " (" + std::strerror(errno) + ")");
  std::vector<std::string> keys = parse_api_keys(text.str(), path);
  if (keys.empty()) throw Error(path + " holds no key (one key per line, # for comments)");
  return keys;
}

}  // namespace

ApiKeys::ApiKeys(std::string fixed, std::string file) : fixed_(std::move(fixed)), file_(file) {
  std::vector<std::string> keys;
  if (!file_.empty()) {
    try {
      keys = read_key_file(file_);
    } catch (const Error& e) {
      throw Error(std::string("--api-key-file: ") + e.what());
    }
  }
  if (!fixed_.empty()) keys.push_back(fixed_);
  keys_ = std::make_shared<const std::vector<std::string>>(std::move(keys));
}

bool ApiKeys::required() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !keys_->empty();
}

bool ApiKeys::matches(const std::string& presented) const {
  std::shared_ptr<const std::vector<std::string>> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys = keys_;
  }
  // Every key is compared (no early exit): the time says how many keys there are, not which
  // one matched or how much of one did.
  bool any = false;
  for (const std::string& k : *keys) any |= same_secret(presented, k);
  return any;
}

std::string ApiKeys::reload() {
  if (file_.empty()) return "SIGUSR2: no --api-key-file to re-read; the keys are unchanged";
  std::vector<std::string> keys;
  try {
    keys = read_key_file(file_);
  } catch (const Error& e) {
    return std::string("SIGUSR2: ") + e.what() + "; the old keys stay in use";
  }
  const size_t n = keys.size();
  if (!fixed_.empty()) keys.push_back(fixed_);
  auto fresh = std::make_shared<const std::vector<std::string>>(std::move(keys));
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys_ = std::move(fresh);
  }
  return "SIGUSR2: " + std::to_string(n) + " key(s) loaded from " + file_ +
         (fixed_.empty() ? "" : " (and --api-key)");
}

KeyReloader::KeyReloader(ApiKeys& keys, std::function<void(const std::string&)> report)
    : keys_(keys), report_(std::move(report)) {
  if (::pipe2(fds_, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  // The handler must never block: with the pipe full, a pending reload is already asked for.
  ::fcntl(fds_[1], F_SETFL, ::fcntl(fds_[1], F_GETFL) | O_NONBLOCK);
  thread_ = std::thread([this] { run(); });
}

KeyReloader::~KeyReloader() {
  stopping_ = true;
  const char stop = 's';  // a full pipe (EAGAIN) wakes the reader as well, which sees stopping_
  while (::write(fds_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  // The pipe stays open until the process ends: a SIGUSR2 that arrives after this (serve's
  // handler read the descriptor just before) then writes into a pipe nobody reads, never into a
  // descriptor number that a later open() has reused.
}

void KeyReloader::run() {
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(fds_[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || stopping_) return;
    report_(keys_.reload());
  }
}

}  // namespace llama2
