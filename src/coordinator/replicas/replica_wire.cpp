#include "coordinator/replicas/replica_wire.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/sampling_params.h"
#include "coordinator/requests/request_constraint.h"

namespace llama2 {
namespace {

enum class Tag : uint8_t { kSubmit = 1, kCancel, kShutdown, kGauges, kToken, kFinished };

template <typename T>
void put(std::string& b, T v) {
  static_assert(std::is_arithmetic_v<T>);
  b.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void put(std::string& b, const std::string& s) {
  put(b, static_cast<uint32_t>(s.size()));
  b.append(s);
}
void put(std::string& b, const std::vector<int>& v) {
  put(b, static_cast<uint32_t>(v.size()));
  b.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int));
}
// A token's alternatives (logprobs): count, then (token, logprob) pairs.
void put(std::string& b, const std::vector<TopLogprob>& top) {
  put(b, static_cast<uint32_t>(top.size()));
  for (const TopLogprob& t : top) {
    put(b, static_cast<int32_t>(t.token));
    put(b, t.logprob);
  }
}

class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size), begin_(data) {}
  bool done() const { return p_ == end_; }
  template <typename T>
  T get() {
    static_assert(std::is_arithmetic_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string str() {
    const uint32_t n = get<uint32_t>();
    return std::string(take(n), n);
  }
  std::vector<int> ints() {
    const uint32_t n = get<uint32_t>();
    std::vector<int> v(n);
    if (n > 0) std::memcpy(v.data(), take(size_t{n} * sizeof(int)), size_t{n} * sizeof(int));
    return v;
  }
  std::vector<TopLogprob> top() {
    const uint32_t n = get<uint32_t>();
    std::vector<TopLogprob> v;
    for (uint32_t i = 0; i < n; ++i) {
      TopLogprob t;
      t.token = get<int32_t>();
      t.logprob = get<float>();
      v.push_back(t);
    }
    return v;
  }
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }

  // A finish reason travels as its enum's byte; an unknown byte is a corrupt message.
  FinishReason reason() {
    const uint8_t b = get<uint8_t>();
    if (b >= kFinishReasonCount) {
      throw Error("replica message: unknown finish reason " + std::to_string(b) + " at byte " +
                  std::to_string(offset() - 1));
    }
    return static_cast<FinishReason>(b);
  }

 private:
  const char* take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) {
      throw Error("replica message truncated at byte " + std::to_string(offset()) + " of " +
                  std::to_string(end_ - begin_));
    }
    const char* at = p_;
    p_ += n;
    return at;
  }
  const char* p_;
  const char* end_;
  const char* begin_;
};

[[noreturn]] void unexpected(const char* what) {
  throw Error(std::string("replica message: unexpected ") + what + " record on this rank");
}

}  // namespace

void WireWriter::submit(const SubmitRequest& req) {
  put(buf_, static_cast<uint8_t>(Tag::kSubmit));
  put(buf_, req.id);
  put(buf_, req.prompt);
  put(buf_, sampling_to_json(req.params).dump());
  put(buf_, req.seed);
  // The constraint as its protocol fields ("" when none); the leader compiles it.
  nlohmann::json fields = nlohmann::json::object();
  if (req.constraint != nullptr) constraint_to_json(*req.constraint, &fields);
  put(buf_, req.constraint != nullptr ? fields.dump() : std::string());
}

void WireWriter::cancel(const CancelRequest& c) {
  put(buf_, static_cast<uint8_t>(Tag::kCancel));
  put(buf_, c.id);
  put(buf_, static_cast<uint8_t>(c.reason));
}

void WireWriter::shutdown(int exit_code) {
  put(buf_, static_cast<uint8_t>(Tag::kShutdown));
  put(buf_, static_cast<int32_t>(exit_code));
}

void WireWriter::gauges(const ReplicaGauges& g) {
  put(buf_, static_cast<uint8_t>(Tag::kGauges));
  put(buf_, static_cast<int32_t>(g.running));
  put(buf_, static_cast<int32_t>(g.pending));
  put(buf_, static_cast<int32_t>(g.kv_used));
  put(buf_, static_cast<int32_t>(g.kv_total));
  put(buf_, g.steps);
  put(buf_, g.preemptions);
  put(buf_, g.spec.verify_steps);
  put(buf_, g.spec.proposed);
  put(buf_, g.spec.accepted);
  put(buf_, g.spec.emitted);
}

void WireWriter::token(const TokenEvent& ev) {
  put(buf_, static_cast<uint8_t>(Tag::kToken));
  put(buf_, ev.id);
  put(buf_, static_cast<int32_t>(ev.index));
  put(buf_, static_cast<int32_t>(ev.token));
  put(buf_, ev.text);
  put(buf_, ev.logprob);
  put(buf_, ev.top_logprobs);
}

void WireWriter::finished(const Finished& done) {
  put(buf_, static_cast<uint8_t>(Tag::kFinished));
  put(buf_, done.id);
  put(buf_, static_cast<uint8_t>(done.finish_reason));
  put(buf_, done.seed);
  put(buf_, static_cast<int32_t>(done.prompt_tokens));
  put(buf_, static_cast<int32_t>(done.cached_tokens));
  put(buf_, done.tokens);
  put(buf_, done.text);
  put(buf_, static_cast<uint32_t>(done.logprobs.size()));  // logprobs: [n] or empty
  for (float x : done.logprobs) put(buf_, x);
  put(buf_, static_cast<uint32_t>(done.top_logprobs.size()));
  for (const auto& top : done.top_logprobs) put(buf_, top);
  put(buf_, static_cast<uint32_t>(done.prompt_logprobs.size()));  // prompt_logprobs or empty
  for (const PromptLogprob& p : done.prompt_logprobs) {
    put(buf_, static_cast<int32_t>(p.token));
    put(buf_, p.logprob);
    put(buf_, static_cast<int32_t>(p.rank));
    put(buf_, p.top);
  }
  put(buf_, static_cast<uint8_t>(done.speculative));
  put(buf_, static_cast<int32_t>(done.spec_proposed));
  put(buf_, static_cast<int32_t>(done.spec_accepted));
  put(buf_, static_cast<int32_t>(done.spec_verify_steps));
}

std::string WireWriter::take() {
  return std::exchange(buf_, std::string());
}

void WireVisitor::on_submit(SubmitRequest&&) {
  unexpected("submit");
}
void WireVisitor::on_cancel(const CancelRequest&) {
  unexpected("cancel");
}
void WireVisitor::on_shutdown(int) {
  unexpected("shutdown");
}
void WireVisitor::on_gauges(const ReplicaGauges&) {
  unexpected("gauges");
}
void WireVisitor::on_token(const TokenEvent&) {
  unexpected("token");
}
void WireVisitor::on_finished(Finished&&) {
  unexpected("finished");
}

namespace {

SubmitRequest read_submit(Reader& r) {
  SubmitRequest req;
  req.id = r.get<int64_t>();
  req.prompt = r.ints();
  req.params = sampling_from_json(nlohmann::json::parse(r.str()), SamplingParams{});
  req.seed = r.get<uint64_t>();
  const std::string constraint = r.str();
  if (!constraint.empty())
    req.constraint = parse_constraint_fields(nlohmann::json::parse(constraint));
  return req;
}

ReplicaGauges read_gauges(Reader& r) {
  ReplicaGauges g;
  g.running = r.get<int32_t>();
  g.pending = r.get<int32_t>();
  g.kv_used = r.get<int32_t>();
  g.kv_total = r.get<int32_t>();
  g.steps = r.get<int64_t>();
  g.preemptions = r.get<int64_t>();
  g.spec.verify_steps = r.get<int64_t>();
  g.spec.proposed = r.get<int64_t>();
  g.spec.accepted = r.get<int64_t>();
  g.spec.emitted = r.get<int64_t>();
  return g;
}

TokenEvent read_token(Reader& r) {
  TokenEvent ev;
  ev.id = r.get<int64_t>();
  ev.index = r.get<int32_t>();
  ev.token = r.get<int32_t>();
  ev.text = r.str();
  ev.logprob = r.get<float>();
  ev.top_logprobs = r.top();
  return ev;
}

Finished read_finished(Reader& r) {
  Finished d;
  d.id = r.get<int64_t>();
  d.finish_reason = r.reason();
  d.seed = r.get<uint64_t>();
  d.prompt_tokens = r.get<int32_t>();
  d.cached_tokens = r.get<int32_t>();
  d.tokens = r.ints();
  d.text = r.str();
  for (uint32_t i = 0, n = r.get<uint32_t>(); i < n; ++i) d.logprobs.push_back(r.get<float>());
  for (uint32_t i = 0, n = r.get<uint32_t>(); i < n; ++i) d.top_logprobs.push_back(r.top());
  for (uint32_t i = 0, n = r.get<uint32_t>(); i < n; ++i) {
    PromptLogprob p;
    p.token = r.get<int32_t>();
    p.logprob = r.get<float>();
    p.rank = r.get<int32_t>();
    p.top = r.top();
    d.prompt_logprobs.push_back(std::move(p));
  }
  const uint8_t spec = r.get<uint8_t>();
  if (spec > static_cast<uint8_t>(SpecUse::kConstrained)) {
    throw Error("replica message: unknown speculative use " + std::to_string(spec));
  }
  d.speculative = static_cast<SpecUse>(spec);
  d.spec_proposed = r.get<int32_t>();
  d.spec_accepted = r.get<int32_t>();
  d.spec_verify_steps = r.get<int32_t>();
  return d;
}

}  // namespace

void read_wire(const char* data, size_t size, WireVisitor& v) {
  Reader r(data, size);
  while (!r.done()) {
    const size_t at = r.offset();
    switch (static_cast<Tag>(r.get<uint8_t>())) {
      case Tag::kSubmit:
        v.on_submit(read_submit(r));
        break;
      case Tag::kCancel: {
        CancelRequest c;
        c.id = r.get<int64_t>();
        c.reason = r.reason();
        v.on_cancel(c);
        break;
      }
      case Tag::kShutdown:
        v.on_shutdown(r.get<int32_t>());
        break;
      case Tag::kGauges:
        v.on_gauges(read_gauges(r));
        break;
      case Tag::kToken:
        v.on_token(read_token(r));
        break;
      case Tag::kFinished:
        v.on_finished(read_finished(r));
        break;
      default:
        throw Error("replica message: unknown record tag at byte " + std::to_string(at));
    }
  }
}

}  // namespace llama2
