#include "coordinator/http/http_exchange.h"

namespace llama2 {

void HttpExchange::on_token(const TokenEvent& ev) {
  started_.store(true, std::memory_order_release);
  if (stream_) push_token(ev);  // a non-streamed answer is built from the end's result
}

void HttpExchange::on_finished(const Finished& done, const Timings& timings) {
  finish(done, timings);
  wake();
}

void HttpExchange::on_error(ErrorCode code, const std::string& message) {
  fail(code, message);
}

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

void HttpExchange::fail(ErrorCode code, const std::string& message) {
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

ExchangeNotifier::ExchangeNotifier() : thread_([this] { run(); }) {}

ExchangeNotifier::~ExchangeNotifier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void ExchangeNotifier::flush(std::vector<std::shared_ptr<EventSink>>& touched) {
  if (touched.empty()) return;
  bool was_idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_idle = pending_.empty();
    if (was_idle) {
      pending_.swap(touched);
    } else {
      pending_.insert(pending_.end(), touched.begin(), touched.end());
    }
  }
  touched.clear();
  if (was_idle) cv_.notify_one();
}

void ExchangeNotifier::run() {
  std::vector<std::shared_ptr<EventSink>> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
    batch.swap(pending_);
    const bool stop = stop_;
    lock.unlock();
    for (const auto& x : batch) x->wake();
    batch.clear();  // the last references of finished exchanges go here, off the engine thread
    if (stop) return;
    lock.lock();
  }
}

}  // namespace llama2
