// Data parallelism's pure parts (src/coordinator/replicas/): the rank layout and its refusals
// (valid --tp values, groups that would span nodes), and the front <-> leader wire format.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/check.h"
#include "common/tuning_knobs.h"
#include "coordinator/replicas/layout.h"
#include "coordinator/replicas/replica_wire.h"

using llama2::ReplicaLayout;

namespace {
std::vector<std::string> nodes(int world, int per_node) {
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.push_back(llama2::node_name(r, per_node));
  return out;
}

std::string refusal(int tp, const std::vector<std::string>& n) {
  try {
    llama2::make_replica_layout(tp, 0, n);
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

// Collects what read_wire decodes.
struct Collect final : llama2::WireVisitor {
  std::vector<llama2::SubmitRequest> submits;
  std::vector<llama2::CancelRequest> cancels;
  std::vector<int> shutdowns;
  std::vector<llama2::ReplicaGauges> gauges;
  std::vector<llama2::TokenEvent> tokens;
  std::vector<llama2::Finished> finished;
  std::string order;
  void on_submit(llama2::SubmitRequest&& r) override { submits.push_back(r), order += 's'; }
  void on_cancel(const llama2::CancelRequest& c) override { cancels.push_back(c), order += 'c'; }
  void on_shutdown(int code) override { shutdowns.push_back(code), order += 'x'; }
  void on_gauges(const llama2::ReplicaGauges& g) override { gauges.push_back(g), order += 'g'; }
  void on_token(const llama2::TokenEvent& ev) override { tokens.push_back(ev), order += 't'; }
  void on_finished(llama2::Finished&& d) override { finished.push_back(d), order += 'f'; }
};
}  // namespace

TEST_SUITE("replicas") {
  TEST_CASE("layout: default is one replica of every rank; --tp 2 of 4 makes two") {
    const ReplicaLayout one = llama2::make_replica_layout(0, 3, nodes(4, 0));
    CHECK(one.tp == 4);
    CHECK(one.replicas == 1);
    CHECK(one.replica_rank == 3);
    CHECK_FALSE(one.leader());
    const ReplicaLayout two = llama2::make_replica_layout(2, 3, nodes(4, 0));
    CHECK(two.replicas == 2);
    CHECK(two.replica == 1);
    CHECK(two.replica_rank == 1);
    CHECK(two.leader_of(1) == 2);
    CHECK(llama2::make_replica_layout(2, 2, nodes(4, 0)).leader());
  }

  TEST_CASE("layout: a --tp that does not divide the ranks is refused with the valid values") {
    CHECK(refusal(3, nodes(4, 0)) ==
          "--tp 3 does not divide the 4 ranks of this job; valid --tp values: 1, 2, 4");
    CHECK(refusal(-1, nodes(4, 0)).find("valid --tp values: 1, 2, 4") != std::string::npos);
    CHECK(refusal(8, nodes(4, 0)).find("does not divide") != std::string::npos);
    CHECK(refusal(5, nodes(6, 0)).find("valid --tp values: 1, 2, 3, 6") != std::string::npos);
  }

  TEST_CASE("layout: a group spanning two (fake) nodes is refused, naming the fix") {
    // 4 ranks, 2 per node: --tp 4 would put one group on both nodes.
    CHECK(llama2::valid_tp_values(nodes(4, 2)) == std::vector<int>{1, 2});
    CHECK(refusal(4, nodes(4, 2)) ==
          "--tp 4 puts replica 0 (ranks 0-3) on 2 nodes (fake-node-0, fake-node-1); a "
          "tensor-parallel group must stay on one node: valid --tp values: 1, 2");
    // 6 ranks, 3 per node: --tp 2 puts ranks 2-3 across the boundary.
    CHECK(llama2::valid_tp_values(nodes(6, 3)) == std::vector<int>{1, 3});
    CHECK(refusal(2, nodes(6, 3)).find("replica 1 (ranks 2-3)") != std::string::npos);
    CHECK(refusal(3, nodes(6, 3)).empty());
  }

  TEST_CASE("layout: a dedicated front leaves rank 0 out of the replicas") {
    const ReplicaLayout front = llama2::make_replica_layout(1, 0, nodes(3, 0), true);
    CHECK(front.front_only());
    CHECK_FALSE(front.leader());
    CHECK(front.replicas == 2);
    CHECK(front.leader_of(0) == 1);
    const ReplicaLayout r2 = llama2::make_replica_layout(1, 2, nodes(3, 0), true);
    CHECK(r2.replica == 1);
    CHECK(r2.leader());
    CHECK(llama2::make_replica_layout(0, 1, nodes(3, 0), true).tp == 2);
    // 5 ranks: 4 engine ranks -> 1, 2, 4; --tp 3 refused naming the engine ranks.
    CHECK(refusal(3, nodes(5, 0)).find("valid --tp values: 1, 5") != std::string::npos);
    try {
      llama2::make_replica_layout(3, 0, nodes(5, 0), true);
      CHECK(false);
    } catch (const llama2::Error& e) {
      CHECK(std::string(e.what()) ==
            "--tp 3 does not divide the 4 engine ranks of this job (rank 0 is the dedicated "
            "front); valid --tp values: 1, 2, 4");
    }
    CHECK_THROWS_AS(llama2::make_replica_layout(0, 0, nodes(1, 0), true), llama2::Error);
  }

  TEST_CASE("wire: every record survives the trip, in order") {
    llama2::WireWriter w;
    llama2::SubmitRequest req;
    req.id = 1234567890123;
    req.prompt = {1, 2, 3, 31999};
    req.params.temperature = 0.5f;
    req.params.top_k = 7;
    req.params.max_new_tokens = 9;
    req.params.stop = {"\n\n", "é"};
    req.params.seed = 42;
    req.params.logprobs = true;
    req.params.top_logprobs = 3;
    req.seed = 0xfeedfacecafebeefULL;
    w.submit(req);
    w.cancel({7, llama2::FinishReason::kTimeout});
    w.gauges({3, 1, 17, 64, 99, 5});
    w.token({7, 5, 300, "h\xc3\xa9llo", -0.25f, {{300, -0.25f}, {12, -2.5f}}});
    llama2::Finished done;
    done.id = 7;
    done.finish_reason = llama2::FinishReason::kStop;
    done.seed = 0xfeedfacecafebeefULL;
    done.prompt_tokens = 12;
    done.cached_tokens = 8;
    done.tokens = {5, 6, 2};
    done.text = std::string("a\0b", 3);
    done.logprobs = {-0.5f, -1.f, -0.125f};
    done.top_logprobs = {{{5, -0.5f}}, {}, {{2, -0.125f}, {9, -3.f}}};
    w.finished(done);
    w.shutdown(3);
    const std::string bytes = w.take();
    CHECK(w.empty());
    Collect c;
    llama2::read_wire(bytes.data(), bytes.size(), c);
    CHECK(c.order == "scgtfx");
    REQUIRE(c.submits.size() == 1);
    CHECK(c.submits[0].id == req.id);
    CHECK(c.submits[0].prompt == req.prompt);
    CHECK(c.submits[0].seed == req.seed);
    CHECK(c.submits[0].params.temperature == doctest::Approx(0.5));
    CHECK(c.submits[0].params.top_k == 7);
    CHECK(c.submits[0].params.max_new_tokens == 9);
    CHECK(c.submits[0].params.stop == req.params.stop);
    CHECK(c.submits[0].params.seed == std::optional<uint64_t>(42));
    CHECK(c.submits[0].params.logprobs);
    CHECK(c.submits[0].params.top_logprobs == 3);
    CHECK(c.cancels[0].reason == llama2::FinishReason::kTimeout);
    CHECK(c.gauges[0].kv_used == 17);
    CHECK(c.gauges[0].steps == 99);
    CHECK(c.gauges[0].preemptions == 5);
    CHECK(c.tokens[0].index == 5);
    CHECK(c.tokens[0].text == "h\xc3\xa9llo");
    CHECK(c.tokens[0].logprob == -0.25f);
    REQUIRE(c.tokens[0].top_logprobs.size() == 2);
    CHECK(c.tokens[0].top_logprobs[1].token == 12);
    CHECK(c.tokens[0].top_logprobs[1].logprob == -2.5f);
    CHECK(c.finished[0].cached_tokens == 8);
    CHECK(c.finished[0].tokens == done.tokens);
    CHECK(c.finished[0].seed == done.seed);
    CHECK(c.finished[0].logprobs == done.logprobs);
    REQUIRE(c.finished[0].top_logprobs.size() == 3);
    CHECK(c.finished[0].top_logprobs[1].empty());
    CHECK(c.finished[0].top_logprobs[2][1].token == 9);
    CHECK(c.finished[0].top_logprobs[2][1].logprob == -3.f);
    CHECK(c.finished[0].text == done.text);
    CHECK(c.shutdowns[0] == 3);
  }

  TEST_CASE("knobs: the data-parallel test hooks are read and checked") {
    auto env = [](const char* name, const char* value) {
      return [=](const char* var) -> const char* {
        return std::string(var) == name ? value : nullptr;
      };
    };
    CHECK(llama2::parse_tuning_knobs(env("LLAMA2_TEST_RANKS_PER_NODE", "2")).test_ranks_per_node ==
          2);
    CHECK(llama2::parse_tuning_knobs(env("LLAMA2_TEST_STEP_DELAY_MS", "20")).test_step_delay_ms ==
          20);
    CHECK(llama2::parse_tuning_knobs(env("X", "1")).test_ranks_per_node == 0);
    for (const char* bad : {"0", "-1", "2x", "abc"}) {
      try {
        llama2::parse_tuning_knobs(env("LLAMA2_TEST_RANKS_PER_NODE", bad));
        CHECK(false);
      } catch (const llama2::Error& e) {
        CHECK(std::string(e.what()).find("LLAMA2_TEST_RANKS_PER_NODE=" + std::string(bad) +
                                         ": expected an integer from 1") == 0);
      }
    }
    CHECK_THROWS_AS(llama2::parse_tuning_knobs(env("LLAMA2_TEST_STEP_DELAY_MS", "0")),
                    llama2::Error);
  }

  TEST_CASE("wire: a truncated buffer or an unknown tag is an Error, not a crash") {
    llama2::WireWriter w;
    w.token({1, 0, 5, "hello"});
    const std::string bytes = w.take();
    for (size_t cut = 1; cut < bytes.size(); ++cut) {
      Collect c;
      CHECK_THROWS_AS(llama2::read_wire(bytes.data(), cut, c), llama2::Error);
    }
    Collect c;
    const std::string bad(1, '\x7f');
    CHECK_THROWS_AS(llama2::read_wire(bad.data(), bad.size(), c), llama2::Error);
    // A record this side does not take (a leader's visitor given a token) is refused too.
    llama2::WireVisitor plain;
    CHECK_THROWS_AS(llama2::read_wire(bytes.data(), bytes.size(), plain), llama2::Error);
  }
}
