#include "coordinator/http/http_exchange.h"

namespace llama2 {

void HttpExchange::push_token(const TokenEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (overflowed_ || bytes_ + ev.text.size() > kMaxQueuedBytes) {
    overflowed_ = true;
    return;
  }
  bytes_ += ev.text.size();
  tokens_.push_back(Token{ev.index, ev.token, ev.text, ev.logprob, ev.top_logprobs});
}

void HttpExchange::finish(const Finished& done, const Timings& timings) {
  std::lock_guard<std::mutex> lock(mu_);
  End e;
  e.finished = done;
  e.timings = timings;
  end_ = std::move(e);
}

void HttpExchange::fail(const std::string& code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    End e;
    e.error_code = code;
    e.error_message = message;
    end_ = std::move(e);
  }
  cv_.notify_all();
}

HttpExchange::News HttpExchange::take(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (tokens_.empty() && !end_ && !overflowed_)
    cv_.wait_for(lock, wait, [this] { return !tokens_.empty() || end_ || overflowed_; });
  News n;
  n.tokens.swap(tokens_);
  bytes_ = 0;
  n.overflowed = overflowed_;
  if (end_) {
    n.end = std::move(end_);
    end_.reset();
  }
  return n;
}

}  // namespace llama2
