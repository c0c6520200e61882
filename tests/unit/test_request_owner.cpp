// The request owner (coordinator/requests/request_owner.{h,cpp}) and its thread-safe half,
// Admission (coordinator/requests/admission.{h,cpp}): FIFO order across clients, deadlines and
// cancel in the queue and while running, disconnect, the one prompt-length check and its one
// message, the refusal counters and the queue depth that `health` and `stats` both read. A real
// BatchScheduler runs under it on a fake engine that always predicts the same token.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/step_runner.h"
#include "coordinator/serving/metrics.h"
#include "coordinator/text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using llama2::Finished;

constexpr int kToken = 7;  // what the fake engine always predicts (never EOS)

const llama2::Tokenizer& tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

class SameTokenEngine final : public llama2::StepExecutor {
 public:
  int steps = 0;
  void execute(const llama2::StepPlan& plan, llama2::StepLogits* out) override {
    ++steps;
    REQUIRE(plan.candidates >= 1);  // greedy rows: the best candidate is enough
    out->rows = plan.logit_rows();
    out->width = plan.candidates;
    out->values.assign(static_cast<size_t>(out->rows) * plan.candidates, 0.f);
    out->ids.assign(out->values.size(), kToken + 1);
    for (int r = 0; r < out->rows; ++r) {
      out->values[static_cast<size_t>(r) * plan.candidates] = 1.f;
      out->ids[static_cast<size_t>(r) * plan.candidates] = kToken;
    }
  }
  int vocab_size() const override { return 512; }
};

struct Owner : llama2::RequestEvents {
  SameTokenEngine engine;
  llama2::ModelConfig config;
  llama2::BlockAllocator blocks;
  llama2::ServeMetrics metrics;
  std::unique_ptr<llama2::Admission> admission;
  std::unique_ptr<llama2::BatchScheduler> scheduler;
  std::unique_ptr<llama2::StepRunner> runner;
  std::unique_ptr<llama2::RequestOwner> owner;
  std::vector<int64_t> admitted;
  std::vector<std::pair<int64_t, std::string>> done;
  std::map<int64_t, Finished> results;
  std::map<int64_t, llama2::Timings> timings;

  // 16 blocks of 4 tokens (64 positions), `max_batch` slots, prompts up to 48 tokens + new.
  explicit Owner(int max_batch, llama2::AdmissionOptions a = {}) : blocks(16, 4) {
    config.vocab_size = 512;
    config.eos_token_id = 2;
    config.max_position_embeddings = 48;
    a.limits.max_position_embeddings = config.max_position_embeddings;
    a.limits.kv_capacity_tokens = 64;
    admission = std::make_unique<llama2::Admission>(a, &metrics);
    scheduler = std::make_unique<llama2::BatchScheduler>(tokenizer(), config, blocks,
                                                         llama2::SchedulerOptions{max_batch, 64});
    runner = std::make_unique<llama2::StepRunner>(*scheduler, engine);
    owner = std::make_unique<llama2::RequestOwner>(*admission, *runner, *this, &metrics);
  }
  void on_admitted(int64_t id) override { admitted.push_back(id); }
  void on_finished(const Finished& f, const llama2::Timings& t) override {
    done.emplace_back(f.id, llama2::to_string(f.finish_reason));
    results[f.id] = f;
    timings[f.id] = t;
  }
  std::optional<llama2::Refusal> submit(int64_t id, int prompt_len, int max_new,
                                        uint64_t client = 0,
                                        Clock::time_point deadline = Clock::time_point::max()) {
    llama2::Reservation place = admission->reserve(0);
    if (!place) return place.refusal();
    llama2::SubmitRequest r;
    r.id = id;
    r.prompt.assign(static_cast<size_t>(prompt_len), 5);
    r.params.temperature = 0.f;
    r.params.max_new_tokens = max_new;
    return owner->submit(std::move(r), std::move(place), deadline, client);
  }
  void run_until_idle() {
    for (int i = 0; i < 1000 && !owner->idle(); ++i) owner->step();
    REQUIRE(owner->idle());
  }
  double sample(const std::string& name) const {
    const std::string text = metrics.render(admission->gauges());
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
  }
};

using Done = std::vector<std::pair<int64_t, std::string>>;

}  // namespace

TEST_SUITE("request owner") {
  TEST_CASE("FIFO: requests are admitted in submit order, whichever client sent them") {
    Owner o(1);
    CHECK_FALSE(o.submit(1, 3, 2, /*client=*/10));
    CHECK_FALSE(o.submit(2, 3, 2, /*client=*/11));
    CHECK_FALSE(o.submit(3, 3, 2, /*client=*/10));
    CHECK(o.owner->queued() == 3);
    CHECK(o.admission->gauges().waiting == 3);
    o.owner->step();
    CHECK(o.admitted == std::vector<int64_t>{1});
    CHECK(o.admission->gauges().waiting == 2);
    CHECK(o.admission->gauges().running == 1);
    o.run_until_idle();
    CHECK(o.admitted == std::vector<int64_t>{1, 2, 3});
    CHECK(o.done == Done{{1, "length"}, {2, "length"}, {3, "length"}});
    CHECK(o.results.at(2).tokens == std::vector<int>{kToken, kToken});
    CHECK(o.results.at(2).prompt_tokens == 3);
    const llama2::Gauges g = o.admission->gauges();
    CHECK(g.waiting == 0);
    CHECK(g.running == 0);
    CHECK(g.kv_blocks_used == 0);
    CHECK(o.sample("llama2_requests_total{finish_reason=\"length\"}") == 3);
  }

  TEST_CASE("a deadline that passes in the queue ends the request there, with no tokens") {
    const auto base = Clock::now() + std::chrono::hours(1000);
    Owner o(1);
    CHECK_FALSE(o.submit(1, 3, 4));
    CHECK_FALSE(o.submit(2, 3, 4, 0, base));
    o.owner->step();  // 1 runs, 2 waits
    CHECK(o.owner->expire(base - std::chrono::hours(1)) == 0);
    CHECK(o.owner->expire(base) == 1);
    CHECK(o.done == Done{{2, "timeout"}});
    CHECK(o.results.at(2).tokens.empty());
    CHECK(o.timings.at(2).queue_s == o.timings.at(2).total_s);
    CHECK(o.timings.at(2).ttft_s == 0);
    CHECK(o.admission->gauges().waiting == 0);
    CHECK(o.owner->queued() == 0);
    o.run_until_idle();
    CHECK(o.results.at(1).finish_reason == llama2::FinishReason::kLength);
    CHECK(o.sample("llama2_requests_total{finish_reason=\"timeout\"}") == 1);
  }

  TEST_CASE("a deadline that passes while running frees the blocks at once") {
    const auto base = Clock::now() + std::chrono::hours(1000);
    Owner o(2);
    CHECK_FALSE(o.submit(1, 3, 8, 0, base));
    o.owner->step();
    CHECK(o.blocks.used_blocks() == 1);  // its 3 prompt tokens (blocks of 4 come on demand)
    CHECK(o.owner->expire(base) == 1);
    CHECK(o.done == Done{{1, "timeout"}});
    CHECK(o.results.at(1).tokens.size() == 1);
    CHECK(o.blocks.used_blocks() == 0);
    CHECK(o.owner->idle());
  }

  TEST_CASE("cancel in the queue and while running; an id ends once") {
    Owner o(1);
    CHECK_FALSE(o.submit(1, 3, 8));
    CHECK_FALSE(o.submit(2, 3, 8));
    o.owner->step();
    CHECK_FALSE(o.owner->cancel(99, llama2::FinishReason::kCancelled));
    CHECK(o.owner->cancel(2, llama2::FinishReason::kCancelled));  // queued
    CHECK(o.admission->gauges().waiting == 0);
    CHECK(o.owner->cancel(1, llama2::FinishReason::kCancelled));  // running
    CHECK(o.done == Done{{2, "cancelled"}, {1, "cancelled"}});
    CHECK(o.results.at(1).tokens == std::vector<int>{kToken});
    CHECK(o.results.at(2).tokens.empty());
    CHECK_FALSE(o.owner->cancel(1, llama2::FinishReason::kCancelled));
    CHECK(o.blocks.used_blocks() == 0);
    CHECK(o.owner->idle());
    CHECK(o.owner->active() == 0);
  }

  TEST_CASE("disconnect cancels every request of that client, queued or running, and no other") {
    Owner o(1);
    CHECK_FALSE(o.submit(1, 3, 8, /*client=*/7));
    CHECK_FALSE(o.submit(2, 3, 2, /*client=*/8));
    CHECK_FALSE(o.submit(3, 3, 2, /*client=*/7));
    o.owner->step();
    CHECK(o.owner->disconnect(7) == 2);
    CHECK(o.done == Done{{1, "cancelled"}, {3, "cancelled"}});
    CHECK(o.owner->disconnect(7) == 0);
    o.run_until_idle();
    CHECK(o.results.at(2).finish_reason == llama2::FinishReason::kLength);
    CHECK(o.blocks.used_blocks() == 0);
  }

  TEST_CASE("one prompt-length check, one message naming the smallest limit") {
    llama2::PromptLimits l;
    l.max_position_embeddings = 48;
    CHECK(llama2::prompt_length_error(l, 40, false, 8) == "");
    CHECK(llama2::prompt_length_error(l, 40, false, 9) ==
          "prompt (40 tokens) + max_new_tokens (9) = 49 exceeds max_position_embeddings (48)");
    // validate_sampling (generate, batch lines) says the same words.
    llama2::SamplingParams p;
    p.max_new_tokens = 9;
    CHECK(llama2::validate_sampling(p, 40, 48) == llama2::prompt_length_error(l, 40, false, 9));
    l.max_seq_len = 32;
    CHECK(llama2::prompt_length_error(l, 30, false, 3) ==
          "prompt (30 tokens) + max_new_tokens (3) = 33 exceeds --max-seq-len (32)");
    l.kv_capacity_tokens = 16;
    CHECK(llama2::prompt_length_error(l, 10, true, 7, "prompt of 40 bytes") ==
          "prompt of 40 bytes (at least 10 tokens) + max_new_tokens (7) = 17 exceeds the KV "
          "cache (16 tokens)");

    // The owner refuses with that message, counts it and keeps nothing.
    Owner o(1);
    const auto refusal = o.submit(1, 40, 9);
    REQUIRE(refusal.has_value());
    CHECK(refusal->code == llama2::ErrorCode::kPromptTooLong);
    CHECK(refusal->message ==
          "prompt (40 tokens) + max_new_tokens (9) = 49 exceeds max_position_embeddings (48)");
    const auto empty = o.submit(2, 0, 1);
    REQUIRE(empty.has_value());
    CHECK(empty->code == llama2::ErrorCode::kInvalidRequest);
    CHECK(empty->message == "prompt must have >= 1 token (got 0)");
    CHECK(o.owner->idle());
    CHECK(o.admission->gauges().waiting == 0);
    CHECK(o.sample("llama2_requests_rejected_total{code=\"prompt_too_long\"}") == 1);
    CHECK(o.sample("llama2_requests_rejected_total{code=\"invalid_request\"}") == 1);
  }

  TEST_CASE("admission: the in-flight limit first, then the queue; every refusal counted") {
    llama2::AdmissionOptions a;
    a.max_queue = 2;
    a.max_inflight_per_client = 3;
    Owner o(1, a);
    const llama2::Reservation busy = o.admission->reserve(3);
    REQUIRE_FALSE(busy);
    REQUIRE(busy.refusal());
    CHECK(busy.refusal()->code == llama2::ErrorCode::kTooManyInFlight);
    llama2::Reservation first = o.admission->reserve(0);
    llama2::Reservation second = o.admission->reserve(2);
    CHECK(first);
    CHECK(second);
    CHECK_FALSE(first.refusal());
    const llama2::Reservation full = o.admission->reserve(0);
    REQUIRE_FALSE(full);
    CHECK(full.refusal()->code == llama2::ErrorCode::kQueueFull);
    CHECK(full.refusal()->message == "queue is full (2 waiting, --max-queue); retry later");
    // The queue depth `health` reports is the one `stats` renders.
    CHECK(o.admission->gauges().waiting == 2);
    CHECK(o.sample("llama2_requests_waiting") == 2);
    o.admission->count_refusal(llama2::ErrorCode::kShuttingDown);
    CHECK(o.sample("llama2_requests_rejected_total{code=\"too_many_in_flight\"}") == 1);
    CHECK(o.sample("llama2_requests_rejected_total{code=\"queue_full\"}") == 1);
    CHECK(o.sample("llama2_requests_rejected_total{code=\"shutting_down\"}") == 1);
    // Dropping a place gives it back; a moved-from one gives back nothing.
    llama2::Reservation moved = std::move(first);
    CHECK(moved);
    CHECK_FALSE(first);  // NOLINT(bugprone-use-after-move): checked on purpose
    { const llama2::Reservation gone = std::move(first); }
    CHECK(o.sample("llama2_requests_waiting") == 2);
    { const llama2::Reservation gone = std::move(moved); }
    CHECK(o.sample("llama2_requests_waiting") == 1);
    second = llama2::Reservation();  // assignment releases what it replaces
    CHECK(o.sample("llama2_requests_waiting") == 0);
  }

  TEST_CASE("a reservation: submitting consumes it, a refusal or a drop on any thread frees it") {
    Owner o(1);
    // Consumed: the place stays counted while the request waits, then leaves with admission.
    CHECK_FALSE(o.submit(1, 3, 2));
    CHECK(o.admission->gauges().waiting == 1);
    o.run_until_idle();
    CHECK(o.admission->gauges().waiting == 0);
    // Refused by the prompt-length check: the place comes back.
    CHECK(o.submit(2, 40, 9));
    CHECK(o.admission->gauges().waiting == 0);
    // Dropped on another thread (a tokenizer worker whose client went away).
    llama2::Reservation place = o.admission->reserve(0);
    CHECK(o.admission->gauges().waiting == 1);
    std::thread([p = std::move(place)]() mutable { p = llama2::Reservation(); }).join();
    CHECK(o.admission->gauges().waiting == 0);
    // A place of another Admission cannot be consumed here.
    llama2::Admission other(llama2::AdmissionOptions{});
    llama2::Reservation foreign = other.reserve(0);
    llama2::SubmitRequest r;
    r.id = 9;
    r.prompt = {5, 5};
    r.params.max_new_tokens = 1;
    CHECK_THROWS_AS(o.owner->submit(std::move(r), std::move(foreign)), llama2::Error);
  }
}
