// `llama2 client`: one request to a running `llama2 serve` over its Unix socket (docs/PROTOCOL.md).
// No MPI, model or tokenizer here: the server does all of that, which makes this the quickest way
// to check a server from a shell script or a health probe.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "client/client.h"
#include "common/check.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"

namespace llama2 {
namespace {

using nlohmann::json;

// Scripts and probes branch on the exit status, so it is part of the help text.
const char* kClientEpilog =
    "\nSampling flags are sent only when given, so the server's defaults apply otherwise.\n"
    "Exit status: 0 the generation finished (any finish_reason) or health/stats answered;\n"
    "1 an error event, the server is not reachable or the connection dropped\n"
    "(\"llama2 client: <code>: <message>\" on stderr); 2 usage error.\n";

// The server's answer to a cut connection normally arrives first; the client's own deadline is
// this much later, so that --timeout-ms ends with the server's done/timeout (with its usage).
constexpr int kClientGraceMs = 5000;
constexpr int kConnectTimeoutMs = 5000;
constexpr int kDefaultQueryTimeoutMs = 10000;  // health / stats without --timeout-ms

cxxopts::Options client_options() {
  cxxopts::Options opts("llama2 client",
                        "Send one request to a running `llama2 serve` and print the answer. "
                        "Token texts stream to stdout; a summary line goes to stderr.");
  // clang-format off
  opts.add_options()
      ("socket", "Unix socket of the server", cxxopts::value<std::string>())
      ("prompt", "Prompt text (BOS is added by the server)", cxxopts::value<std::string>())
      ("prompt-tokens", "Prompt as comma-separated token ids, e.g. 1,450,4996",
       cxxopts::value<std::string>())
      ("health", "Print the server's health JSON")
      ("stats", "Print the server's metrics (Prometheus text)")
      ("no-stream", "Ask for the whole text in the done event instead of token events")
      ("timeout-ms", "Request deadline, sent to the server as timeout_ms (the client gives up "
       + std::to_string(kClientGraceMs) + " ms later); 0 = the server's default",
       cxxopts::value<int>()->default_value("0"))
      ("json", "Print the done event (one JSON line) instead of the text")
      ("h,help", "Show this help");
  // clang-format on
  add_sampling_options(opts);
  return opts;
}

std::vector<int64_t> parse_token_list(const std::string& text, const std::string& help) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0) {
      throw UsageError("--prompt-tokens: '" + item + "' is not a token id (want e.g. 1,450,4996)",
                       help);
    }
    ids.push_back(v);
  }
  if (ids.empty()) throw UsageError("--prompt-tokens: no token ids given", help);
  return ids;
}

// The generate request: only what the user gave explicitly, so the server's defaults apply.
json build_request(const cxxopts::ParseResult& args, const std::string& help) {
  json req = {{"op", "generate"}};
  if (args.count("prompt")) req["prompt"] = args["prompt"].as<std::string>();
  if (args.count("prompt-tokens")) {
    req["prompt_tokens"] = parse_token_list(args["prompt-tokens"].as<std::string>(), help);
  }
  if (args.count("temperature")) req["temperature"] = args["temperature"].as<float>();
  if (args.count("top-p")) req["top_p"] = args["top-p"].as<float>();
  if (args.count("top-k")) req["top_k"] = args["top-k"].as<int>();
  if (args.count("repetition-penalty")) {
    req["repetition_penalty"] = args["repetition-penalty"].as<float>();
  }
  if (args.count("presence-penalty")) {
    req["presence_penalty"] = args["presence-penalty"].as<float>();
  }
  if (args.count("frequency-penalty")) {
    req["frequency_penalty"] = args["frequency-penalty"].as<float>();
  }
  if (args.count("max-new-tokens")) req["max_new_tokens"] = args["max-new-tokens"].as<int>();
  if (args.count("seed")) req["seed"] = args["seed"].as<uint64_t>();
  if (args.count("stop")) req["stop"] = args["stop"].as<std::vector<std::string>>();
  if (args.count("ignore-eos")) req["ignore_eos"] = true;
  if (args.count("no-stream")) req["stream"] = false;
  const int timeout_ms = args["timeout-ms"].as<int>();
  if (timeout_ms > 0) req["timeout_ms"] = timeout_ms;
  return req;
}

std::string field_text(const json& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return it->is_string() ? it->get<std::string>() : it->dump();
}

int report_error(const json& error_event) {
  std::cerr << "llama2 client: " << field_text(error_event, "code", "error") << ": "
            << field_text(error_event, "message", error_event.dump()) << std::endl;
  return 1;
}

// "finish_reason=length tokens=17 ttft=0.020s total=0.310s" (absent values are left out).
std::string summary(const json& done) {
  std::string s = "finish_reason=" + field_text(done, "finish_reason", "?");
  const json usage = done.value("usage", json::object());
  if (usage.is_object() && usage.contains("completion_tokens")) {
    s += " tokens=" + usage["completion_tokens"].dump();
  }
  const json t = done.value("timings", json::object());
  auto seconds = [&](const char* key, const char* label) {
    if (!t.is_object() || !t.contains(key) || !t[key].is_number()) return;
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s=%.3fs", label, t[key].get<double>());
    s += buf;
  };
  seconds("time_to_first_token_s", "ttft");
  seconds("total_s", "total");
  return s;
}

int run_generate_request(Client& client, const json& req, bool print_json, int timeout_ms) {
  bool streamed = false;  // only the reader thread writes it until generate() returns
  auto on_token = [print_json, &streamed](const json& ev) {
    if (print_json) return;
    const auto* text = ev.contains("text") ? ev["text"].get_ptr<const std::string*>() : nullptr;
    if (!text || text->empty()) return;
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fflush(stdout);  // the point of streaming: the user sees each piece as it arrives
    streamed = true;
  };
  const int client_timeout = timeout_ms > 0 ? timeout_ms + kClientGraceMs : 0;
  const json result = client.generate(req, client_timeout, on_token);
  if (field_text(result, "event", "") != "done") {
    // End a partly streamed line before the error; --json callers get the error event itself.
    if (print_json) {
      std::cout << result.dump() << std::endl;
    } else if (streamed) {
      std::fputs("\n", stdout);
      std::fflush(stdout);
    }
    return report_error(result);
  }
  if (print_json) {
    std::cout << result.dump() << std::endl;
  } else {
    const auto text = result.find("text");  // present when stream was false
    if (text != result.end() && text->is_string()) {
      const auto& whole = text->get_ref<const std::string&>();  // fwrite: text may hold NUL
      std::fwrite(whole.data(), 1, whole.size(), stdout);
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }
  std::cerr << "llama2 client: " << summary(result) << std::endl;
  return 0;
}

}  // namespace

int run_client(int argc, char** argv) {
  cxxopts::Options opts = client_options();
  const CommandLine cl = parse_command(opts, argc, argv, {"socket PATH"}, kClientEpilog);
  if (cl.help_requested) return 0;
  const cxxopts::ParseResult& args = cl.args;
  const std::string& help = cl.help;
  require_one_of(cl, {"prompt", "prompt-tokens", "health", "stats"},
                 "give exactly one of --prompt, --prompt-tokens, --health, --stats");
  const int timeout_ms = args["timeout-ms"].as<int>();
  if (timeout_ms < 0) throw UsageError("--timeout-ms must be >= 0", help);
  // Built before connecting so that a bad flag is a usage error even with no server running.
  const bool generating = args.count("prompt") || args.count("prompt-tokens");
  const json req = generating ? build_request(args, help) : json();

  std::unique_ptr<Client> client;
  try {
    client = Client::connect(args["socket"].as<std::string>(), kConnectTimeoutMs);
  } catch (const Error& e) {
    return report_error(client_error_event(nullptr, "server_unavailable", e.what()));
  }
  const int query_timeout = timeout_ms > 0 ? timeout_ms : kDefaultQueryTimeoutMs;
  if (args.count("health")) {
    const json h = client->health(query_timeout);
    if (field_text(h, "event", "") != "health") return report_error(h);
    std::cout << h.dump() << std::endl;
    return 0;
  }
  if (args.count("stats")) {
    try {
      std::cout << client->stats(query_timeout) << std::flush;
    } catch (const Error& e) {
      std::cerr << "llama2 client: " << e.what() << std::endl;  // already "<code>: <message>"
      return 1;
    }
    return 0;
  }
  return run_generate_request(*client, req, args.count("json") > 0, timeout_ms);
}

}  // namespace llama2
