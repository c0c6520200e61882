#include "coordinator/cli/serve_http.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "common/check.h"

namespace llama2 {

void add_http_options(cxxopts::Options& opts) {
  const HttpOptions d;
  opts.add_options("HTTP")(
      "http",
      "Also serve the OpenAI-compatible HTTP API on HOST:PORT (or PORT: 127.0.0.1); the only TCP "
      "listener llama2 opens, off unless given",
      cxxopts::value<std::string>())(
      "served-model-name",
      "The model names HTTP requests may give, comma-separated or the flag repeated; /v1/models "
      "lists them all, the first labels /metrics (default: the model directory's name)",
      cxxopts::value<std::vector<std::string>>())(
      "strict-api",
      "HTTP: refuse request fields this server does not use with 400 (default: ignore them, "
      "logging each name once)")(
      "api-key",
      "HTTP: require \"Authorization: Bearer KEY\" on /v1/ routes (default: $LLAMA2_API_KEY; "
      "prefer the variable: arguments are visible to other users in ps)",
      cxxopts::value<std::string>())(
      "api-key-file",
      "HTTP: a file of API keys, one per line (# comments and blank lines ignored), any of which "
      "is let in beside --api-key; re-read on SIGUSR2, keeping the old keys when it cannot be "
      "read or holds none (default: $LLAMA2_API_KEY_FILE)",
      cxxopts::value<std::string>())(
      "access-log",
      "HTTP: one line per request on stderr (time, request id, route, status, model, tokens, "
      "TTFT, total time, client): off, text or json",
      cxxopts::value<std::string>()->default_value("off"))(
      "allowed-origins",
      "HTTP: CORS for browsers: \"*\" or a comma list of origins (https://app.example.com) whose "
      "pages may call the API; preflight OPTIONS requests are answered (default: no CORS)",
      cxxopts::value<std::string>())(
      "http-allow-unauthenticated",
      "HTTP: allow a non-loopback --http host without an API key (prints a warning)")(
      "http-max-body-bytes", "HTTP: larger request bodies get 413",
      cxxopts::value<size_t>()->default_value(std::to_string(d.max_body_bytes)))(
      "http-threads",
      "HTTP: connection threads, the most concurrent HTTP clients (cpp-httplib serves each "
      "connection on its own thread)",
      cxxopts::value<int>()->default_value(std::to_string(d.threads)));
}

HttpSettings http_settings_from(const cxxopts::ParseResult& args) {
  HttpSettings s;
  s.enabled = args.count("http") > 0;
  if (args.count("served-model-name")) {
    for (const std::string& name : args["served-model-name"].as<std::vector<std::string>>())
      if (!name.empty()) s.served_models.push_back(name);
  }
  s.strict_api = args.count("strict-api") > 0;
  // Only a value given on the command line caps an absent max_tokens (vLLM's rest-of-context
  // default would otherwise be cut at the flag's built-in default).
  if (args.count("max-new-tokens")) s.max_tokens_cap = args["max-new-tokens"].as<int>();
  if (args.count("api-key")) {
    s.front.api_key = args["api-key"].as<std::string>();
  } else if (const char* key = std::getenv("LLAMA2_API_KEY")) {
    s.front.api_key = key;
  }
  if (args.count("api-key-file")) {
    s.front.api_key_file = args["api-key-file"].as<std::string>();
  } else if (const char* file = std::getenv("LLAMA2_API_KEY_FILE")) {
    s.front.api_key_file = file;
  }
  s.access_log = args["access-log"].as<std::string>();
  if (args.count("allowed-origins")) s.allowed_origins = args["allowed-origins"].as<std::string>();
  s.allow_unauthenticated = args.count("http-allow-unauthenticated") > 0;
  s.front.max_body_bytes = args["http-max-body-bytes"].as<size_t>();
  s.front.threads = args["http-threads"].as<int>();
  if (s.enabled) s.spec = args["http"].as<std::string>();
  return s;
}

void validate_http_settings(HttpSettings& s) {
  if (!s.enabled) return;
  if (!http_front_available()) {
    throw Error(
        "--http: this llama2 was built without cpp-httplib (install libcpp-httplib-dev "
        "or configure with -DLLAMA2_HTTPLIB_DIR=DIR holding httplib.h, then rebuild)");
  }
  const std::string& spec = s.spec;
  const size_t colon = spec.rfind(':');
  std::string port = spec;
  if (colon != std::string::npos) {
    s.front.host = spec.substr(0, colon);
    port = spec.substr(colon + 1);
  }
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535 || s.front.host.empty()) {
    throw Error(
        "--http must be HOST:PORT or PORT with PORT in [0, 65535] (0: any free port) "
        "(got \"" +
        spec + "\")");
  }
  s.front.port = static_cast<int>(p);
  s.front.access_log = parse_access_log_format(s.access_log);
  if (!s.allowed_origins.empty()) s.front.cors = parse_allowed_origins(s.allowed_origins);
  if (s.front.threads < 1) {
    throw Error("--http-threads must be >= 1 (got " + std::to_string(s.front.threads) + ")");
  }
  if (s.front.max_body_bytes < 1024) {
    throw Error("--http-max-body-bytes must be >= 1024 (got " +
                std::to_string(s.front.max_body_bytes) + ")");
  }
  if (!is_loopback_host(s.front.host) && s.front.api_key.empty() && s.front.api_key_file.empty()) {
    if (!s.allow_unauthenticated) {
      throw Error("--http " + s.front.host +
                  " is not a loopback address and no API key is set: give --api-key (or "
                  "LLAMA2_API_KEY) or --api-key-file, or --http-allow-unauthenticated to serve "
                  "anyone who can "
                  "reach the port");
    }
    std::cerr << "llama2 serve: WARNING: the HTTP API on " << s.front.host
              << " accepts requests from anyone who can reach it (no API key)" << std::endl;
  }
}

std::unique_ptr<HttpFront> start_http_front(const HttpSettings& s, const TuningKnobs& knobs) {
  HttpOptions opts = s.front;
  opts.thread_nice = knobs.http_thread_nice;
  auto front = std::make_unique<HttpFront>(opts);
  front->start();
  std::cerr << "llama2 serve: HTTP bound to " << s.front.host << ":" << front->port()
            << " (503 \"starting\" until the model is loaded)" << std::endl;
  if (knobs.test_http_start_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(knobs.test_http_start_delay_ms));
  }
  return front;
}

std::string default_served_model(const std::string& model_dir, const std::string& synthetic) {
  if (!synthetic.empty()) return "synthetic-" + synthetic;
  std::string d = model_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

}  // namespace llama2
