// `serve`'s HTTP flags (--http and its companions) and the start of the HTTP front on rank 0,
// apart from cli_serve.cpp so that the command itself stays a short list of named parts.
#pragma once

#include <cxxopts.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/tuning_knobs.h"
#include "coordinator/http/http_front.h"

namespace llama2 {

struct HttpSettings {
  bool enabled = false;  // --http given
  std::string spec;      // its value, parsed into front.host / front.port by validate
  HttpOptions front;
  // --served-model-name's names (comma-separated, or the flag repeated); empty: the default
  // (default_served_model).
  std::vector<std::string> served_models;
  bool allow_unauthenticated = false;
  std::string access_log = "off";  // --access-log, parsed into front.access_log by validate
  std::string allowed_origins;     // --allowed-origins, parsed into front.cors by validate
  bool strict_api = false;  // --strict-api: unknown request fields get 400 instead of a log line
  // --max-new-tokens when given on the command line: it caps an HTTP request without max_tokens
  // (whose default is the rest of the context); unset otherwise.
  std::optional<int> max_tokens_cap;
};

void add_http_options(cxxopts::Options& opts);
// Reads the flags and LLAMA2_API_KEY (--api-key wins); nothing checked yet (every rank).
HttpSettings http_settings_from(const cxxopts::ParseResult& args);
// Rank 0, before the engine opens: parses --http into front.host / front.port; Error naming the
// flag and the allowed values, e.g. a non-loopback host without --api-key or
// --http-allow-unauthenticated, or --http in a build without cpp-httplib. Prints the warning for
// an unauthenticated non-loopback front.
void validate_http_settings(HttpSettings& s);
// Rank 0, after validate_http_settings and before the engine opens: binds the front, which answers
// 503 "starting" until serve attaches the engine's parts (HttpFront::attach), and says so on
// stderr. knobs.test_http_start_delay_ms (tests only) then holds rank 0 that long, so a test can
// see the "starting" answers of a model that loads in milliseconds.
std::unique_ptr<HttpFront> start_http_front(const HttpSettings& s, const TuningKnobs& knobs);
// The name /v1/models reports and requests may give without --served-model-name: the model
// directory's last component (or "synthetic-NAME").
std::string default_served_model(const std::string& model_dir, const std::string& synthetic);

}  // namespace llama2
