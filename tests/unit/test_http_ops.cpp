// The HTTP front's operations parts without sockets (src/coordinator/http/access_log.h,
// api_keys.h, http_ops.h): the access log's formats and escaping (JSON lines read back by
// nlohmann's parser), request ids, key files and their reload through the SIGUSR2 pipe, CORS
// origins and the responses counted by status.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/check.h"
#include "coordinator/http/access_log.h"
#include "coordinator/http/api_keys.h"
#include "coordinator/http/http_ops.h"
#include "coordinator/serving/metrics.h"

namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

llama2::AccessRecord hostile_record() {
  llama2::AccessRecord r;
  r.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764849600123));
  r.request_id = "req-1";
  r.method = "POST";
  r.route = "/v1/completions\" 200 x=\"forged\nnext line\x01\t\\";
  r.status = 200;
  r.model = "m \"quoted\"\r\n";
  r.prompt_tokens = 5;
  r.completion_tokens = 8;
  r.cached_tokens = 4;
  r.ttft_s = 0.01234;
  r.total_s = 0.5;
  r.client = "127.0.0.1:5555";
  return r;
}

// Everything written to a pipe until its write end closes.
struct PipeReader {
  int fds[2];
  PipeReader() { REQUIRE(::pipe(fds) == 0); }
  std::string drain() {
    ::close(fds[1]);
    std::string out;
    char b[4096];
    for (ssize_t n; (n = ::read(fds[0], b, sizeof(b))) > 0;) out.append(b, static_cast<size_t>(n));
    ::close(fds[0]);
    return out;
  }
};

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/llama2_unit_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_SUITE("http_ops") {
  TEST_CASE("--access-log takes off, text or json; anything else names the allowed values") {
    CHECK(llama2::parse_access_log_format("off") == llama2::AccessLogFormat::kOff);
    CHECK(llama2::parse_access_log_format("text") == llama2::AccessLogFormat::kText);
    CHECK(llama2::parse_access_log_format("json") == llama2::AccessLogFormat::kJson);
    const std::string e = error_of([] { llama2::parse_access_log_format("JSON"); });
    CHECK(e == "--access-log must be off, text or json (got \"JSON\")");
  }

  TEST_CASE("request ids: 1-128 of [A-Za-z0-9._:-] kept, others replaced, a huge header refused") {
    CHECK(llama2::request_id_problem("abc-DEF_1.2:3") == "");
    CHECK(llama2::request_id_problem(std::string(128, 'a')) == "");
    CHECK(llama2::request_id_problem(std::string(129, 'a')) ==
          "longer than 128 characters (got 129)");
    CHECK(llama2::request_id_problem("ab\"c") ==
          "character 0x22 at 2 is not one of [A-Za-z0-9._:-]");
    CHECK(llama2::request_id_problem("a b") != "");
    CHECK(llama2::request_id_problem("a\nb") != "");
    CHECK(llama2::request_id_problem("") == "empty");

    const llama2::RequestIdChoice none = llama2::choose_request_id(nullptr);
    CHECK(none.id.size() == 32);
    CHECK(llama2::request_id_problem(none.id) == "");
    CHECK(none.replaced_because.empty());
    CHECK(llama2::choose_request_id(nullptr).id != none.id);

    const std::string given = "trace-42";
    CHECK(llama2::choose_request_id(&given).id == "trace-42");

    const std::string bad = "has space";
    const llama2::RequestIdChoice replaced = llama2::choose_request_id(&bad);
    CHECK(replaced.id != bad);
    CHECK(llama2::request_id_problem(replaced.id) == "");
    CHECK(replaced.replaced_because.find("character 0x20 at 3") != std::string::npos);
    CHECK_FALSE(replaced.error);

    const std::string huge(10 * 1024, 'a');
    const llama2::RequestIdChoice refused = llama2::choose_request_id(&huge);
    REQUIRE(refused.error);
    CHECK(refused.error->status == 400);
    CHECK(refused.error->param == "X-Request-Id");
    CHECK(refused.error->message.find("10240 bytes") != std::string::npos);
  }

  TEST_CASE("a JSON access line reads back as the record, whatever its strings hold") {
    const llama2::AccessRecord r = hostile_record();
    const std::string line = llama2::format_access_line(r, llama2::AccessLogFormat::kJson);
    CHECK(line.back() == '\n');
    CHECK(line.find('\n') == line.size() - 1);  // one line: no raw newline inside
    const json j = json::parse(line);
    CHECK(j["time"] == "2025-12-04T12:00:00.123Z");
    CHECK(j["request_id"] == r.request_id);
    CHECK(j["route"] == r.route);
    CHECK(j["model"] == r.model);
    CHECK(j["status"] == 200);
    CHECK(j["prompt_tokens"] == 5);
    CHECK(j["completion_tokens"] == 8);
    CHECK(j["cached_tokens"] == 4);
    CHECK(j["ttft_ms"].get<double>() == doctest::Approx(12.3));
    CHECK(j["total_ms"].get<double>() == doctest::Approx(500.0));
    CHECK(j["client"] == "127.0.0.1:5555");
    llama2::AccessRecord none = r;
    none.ttft_s = -1;
    CHECK(json::parse(llama2::format_access_line(none, llama2::AccessLogFormat::kJson))["ttft_ms"]
              .is_null());
  }

  TEST_CASE("a text access line quotes and escapes client strings: no forged field, one line") {
    const std::string line =
        llama2::format_access_line(hostile_record(), llama2::AccessLogFormat::kText);
    CHECK(line.find('\n') == line.size() - 1);
    CHECK(line.find('\r') == std::string::npos);
    CHECK(line.find('\x01') == std::string::npos);
    CHECK(line.find('\t') == std::string::npos);
    CHECK(line ==
          "2025-12-04T12:00:00.123Z request_id=\"req-1\" client=\"127.0.0.1:5555\" "
          "\"POST /v1/completions\\\" 200 x=\\\"forged\\nnext line\\x01\\t\\\\\" 200 "
          "model=\"m \\\"quoted\\\"\\r\\n\" prompt_tokens=5 completion_tokens=8 cached_tokens=4 "
          "ttft_ms=12.3 total_ms=500.0\n");
  }

  TEST_CASE("the access log's thread writes every line; off writes the notes only") {
    for (const auto format : {llama2::AccessLogFormat::kJson, llama2::AccessLogFormat::kOff}) {
      PipeReader pipe;
      {
        llama2::AccessLog log(format, pipe.fds[1]);
        for (int i = 0; i < 100; ++i) {
          llama2::AccessRecord r = hostile_record();
          r.request_id = "r" + std::to_string(i);
          log.record(std::move(r));
        }
        log.note("r7", "X-Request-Id longer than 128 characters: replaced");
      }  // the destructor writes what is queued
      const std::string out = pipe.drain();
      std::istringstream in(out);
      int access = 0, notes = 0;
      for (std::string line; std::getline(in, line);) {
        if (format == llama2::AccessLogFormat::kJson) {
          const json j = json::parse(line);
          if (j.contains("note")) {
            ++notes;
            CHECK(j["request_id"] == "r7");
          } else {
            CHECK(j["request_id"] == "r" + std::to_string(access));
            ++access;
          }
        } else {
          CHECK(line.find("request_id=\"r7\"") != std::string::npos);
          ++notes;
        }
      }
      CHECK(access == (format == llama2::AccessLogFormat::kJson ? 100 : 0));
      CHECK(notes == 1);
    }
  }

  TEST_CASE("a key file: one key per line, comments, blanks and CRs skipped") {
    CHECK(llama2::parse_api_keys("# keys\n\nalpha\r\n  beta  \n#gamma\n\tdelta\n", "k") ==
          std::vector<std::string>{"alpha", "beta", "delta"});
    CHECK(llama2::parse_api_keys("", "k").empty());
    CHECK(error_of([] { llama2::parse_api_keys("ok\nhas space\n", "/etc/keys"); }) ==
          "/etc/keys:2: a key holds a blank or a control character (one key per line, # for "
          "comments)");
  }

  TEST_CASE("keys: any of them is let in; a reload replaces them, a bad file keeps the old ones") {
    const std::string path = temp_file("keys", "# two keys\nkey-one\nkey-two\n");
    llama2::ApiKeys keys("fixed-key", path);
    CHECK(keys.required());
    CHECK(keys.matches("key-one"));
    CHECK(keys.matches("key-two"));
    CHECK(keys.matches("fixed-key"));
    CHECK_FALSE(keys.matches("key-on"));
    CHECK_FALSE(keys.matches("key-one2"));
    CHECK_FALSE(keys.matches(""));

    std::ofstream(path) << "key-three\n";
    CHECK(keys.reload() == "SIGUSR2: 1 key(s) loaded from " + path + " (and --api-key)");
    CHECK(keys.matches("key-three"));
    CHECK_FALSE(keys.matches("key-one"));
    CHECK(keys.matches("fixed-key"));

    std::ofstream(path) << "# nothing\n\n";
    const std::string why = keys.reload();
    CHECK(why.find(path + " holds no key") != std::string::npos);
    CHECK(why.find("the old keys stay in use") != std::string::npos);
    CHECK(keys.matches("key-three"));

    ::unlink(path.c_str());
    CHECK(keys.reload().find("cannot read " + path) != std::string::npos);
    CHECK(keys.matches("key-three"));

    CHECK(error_of([&] { llama2::ApiKeys("", path); }).find("--api-key-file: cannot read") == 0);
    const std::string empty = temp_file("empty", "# none\n");
    CHECK(error_of([&] { llama2::ApiKeys("", empty); }).find("holds no key") != std::string::npos);
    ::unlink(empty.c_str());
    CHECK_FALSE(llama2::ApiKeys("", "").required());
    CHECK(llama2::ApiKeys("", "").reload().find("no --api-key-file") != std::string::npos);
  }

  TEST_CASE("a byte on the reload pipe (serve's SIGUSR2 handler) reloads on the reloader thread") {
    const std::string path = temp_file("reload", "old-key\n");
    llama2::ApiKeys keys("", path);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> reports;
    {
      llama2::KeyReloader reloader(keys, [&](const std::string& what) {
        std::lock_guard<std::mutex> lock(mu);
        reports.push_back(what);
        cv.notify_all();
      });
      std::ofstream(path) << "new-key\n";
      const char r = 'r';
      REQUIRE(::write(reloader.write_fd(), &r, 1) == 1);
      std::unique_lock<std::mutex> lock(mu);
      REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return !reports.empty(); }));
    }
    CHECK(reports.size() == 1);
    CHECK(reports[0] == "SIGUSR2: 1 key(s) loaded from " + path);
    CHECK(keys.matches("new-key"));
    CHECK_FALSE(keys.matches("old-key"));
    ::unlink(path.c_str());
  }

  TEST_CASE("HttpOps: a bearer token of any key is let in, others get 401") {
    const std::string path = temp_file("ops", "k1\nk2\n");
    llama2::HttpOpsOptions o;
    o.api_key_file = path;
    llama2::HttpOps ops(o);
    CHECK_FALSE(ops.check_key("Bearer k1"));
    CHECK_FALSE(ops.check_key("Bearer k2"));
    const auto wrong = ops.check_key("Bearer k3");
    REQUIRE(wrong);
    CHECK(wrong->status == 401);
    CHECK(ops.check_key("")->message.find("missing") != std::string::npos);
    CHECK(ops.check_key("k1"));  // no "Bearer "
    ::unlink(path.c_str());
    CHECK_FALSE(llama2::HttpOps(llama2::HttpOpsOptions{}).check_key(""));  // no key: open
  }

  TEST_CASE("--allowed-origins: * or a list of SCHEME://HOST[:PORT]") {
    const llama2::CorsPolicy any = llama2::parse_allowed_origins("*");
    CHECK(any.any);
    CHECK(llama2::cors_allow_origin(any, "https://x.example") == std::string("*"));
    CHECK_FALSE(llama2::cors_allow_origin(any, ""));
    const llama2::CorsPolicy list =
        llama2::parse_allowed_origins("https://app.example.com, http://localhost:3000/");
    CHECK_FALSE(list.any);
    CHECK(list.origins ==
          std::vector<std::string>{"https://app.example.com", "http://localhost:3000"});
    CHECK(llama2::cors_allow_origin(list, "http://localhost:3000") ==
          std::string("http://localhost:3000"));
    CHECK_FALSE(llama2::cors_allow_origin(list, "https://evil.example"));
    CHECK_FALSE(llama2::cors_allow_origin(llama2::CorsPolicy{}, "http://localhost:3000"));
    for (const char* bad : {"example.com", "https://a.example/path", "", "https://a,"}) {
      CAPTURE(bad);
      CHECK(error_of([bad] { llama2::parse_allowed_origins(bad); }).find("--allowed-origins: ") ==
            0);
    }
  }

  TEST_CASE("responses are counted by status") {
    llama2::StatusCounts counts;
    for (int s : {200, 200, 401, 503, 42}) counts.count(s);
    CHECK(counts.render() ==
          "# HELP llama2_http_responses_total HTTP responses by status (0: outside 100-599).\n"
          "# TYPE llama2_http_responses_total counter\n"
          "llama2_http_responses_total{status=\"0\"} 1\n"
          "llama2_http_responses_total{status=\"200\"} 2\n"
          "llama2_http_responses_total{status=\"401\"} 1\n"
          "llama2_http_responses_total{status=\"503\"} 1\n");
  }

  TEST_CASE("/metrics: vLLM v1's names with their types and suffixes, beside v0's") {
    llama2::ServeMetrics m;
    m.request_finished(llama2::FinishReason::kStop, 0.001, 0.02, 0.1, 7, 3);
    m.request_finished(llama2::FinishReason::kLength, 0.001, 0.02, 0.1, 300, 0);
    m.inter_token(0.004);
    m.inter_token(0.006);
    llama2::Gauges g;
    g.kv_blocks_used = 3;
    g.kv_blocks_total = 12;
    g.prefix_queried_tokens = 40;
    g.prefix_hit_tokens = 16;
    g.preemptions = 2;
    const std::string text = m.render_vllm(g, "tiny");
    // name -> value of each unlabelled-but-model_name sample, and each family's TYPE.
    std::map<std::string, std::string> types, values;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream t(line.substr(7));
        std::string name, type;
        t >> name >> type;
        types[name] = type;
      } else if (line[0] != '#') {
        const size_t sp = line.rfind(' ');
        values[line.substr(0, sp)] = line.substr(sp + 1);
      }
    }
    const std::string l = "{model_name=\"tiny\"}";
    CHECK(types["vllm:kv_cache_usage_perc"] == "gauge");
    CHECK(values["vllm:kv_cache_usage_perc" + l] == "0.25");
    CHECK(values["vllm:gpu_cache_usage_perc" + l] == "0.25");
    CHECK(types["vllm:prefix_cache_queries_total"] == "counter");
    CHECK(values["vllm:prefix_cache_queries_total" + l] == "40");
    CHECK(types["vllm:prefix_cache_hits_total"] == "counter");
    CHECK(values["vllm:prefix_cache_hits_total" + l] == "16");
    CHECK(types["vllm:num_preemptions_total"] == "counter");
    CHECK(values["vllm:num_preemptions_total" + l] == "2");
    CHECK(types["vllm:inter_token_latency_seconds"] == "histogram");
    CHECK(values["vllm:inter_token_latency_seconds_count" + l] == "2");
    CHECK(values["vllm:inter_token_latency_seconds_sum" + l] == "0.01");
    CHECK(values["vllm:inter_token_latency_seconds_bucket{model_name=\"tiny\",le=\"0.005\"}"] ==
          "1");
    CHECK(types["vllm:request_prompt_tokens"] == "histogram");
    CHECK(values["vllm:request_prompt_tokens_count" + l] == "2");
    CHECK(values["vllm:request_prompt_tokens_sum" + l] == "307");
    CHECK(values["vllm:request_prompt_tokens_bucket{model_name=\"tiny\",le=\"10\"}"] == "1");
    CHECK(values["vllm:request_prompt_tokens_bucket{model_name=\"tiny\",le=\"+Inf\"}"] == "2");
    CHECK(types["vllm:request_generation_tokens"] == "histogram");
    CHECK(values["vllm:request_generation_tokens_sum" + l] == "3");
    CHECK(values["vllm:request_generation_tokens_bucket{model_name=\"tiny\",le=\"1\"}"] == "1");
    // Prometheus' rules: a counter's samples end in _total; no family is declared twice.
    for (const auto& family : types) {  // no structured binding: CAPTURE's lambda (clang 14)
      const std::string& name = family.first;
      const std::string& type = family.second;
      CAPTURE(name);
      if (type == "counter") CHECK(name.size() > 6);
      if (type == "counter") CHECK(name.substr(name.size() - 6) == "_total");
    }
    CHECK(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) > types.size());
    size_t declared = 0;
    for (size_t at = 0; (at = text.find("# TYPE ", at)) != std::string::npos; ++at) ++declared;
    CHECK(declared == types.size());
  }
}
