#include "coordinator/http/http_ops.h"

#include "common/check.h"

namespace llama2 {

CorsPolicy parse_allowed_origins(const std::string& value) {
  CorsPolicy p;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    std::string o = value.substr(start, comma - start);
    start = comma + 1;
    const size_t b = o.find_first_not_of(' '), e = o.find_last_not_of(' ');
    o = b == std::string::npos ? "" : o.substr(b, e - b + 1);
    if (o == "*") {
      p.any = true;
      continue;
    }
    while (o.size() > 1 && o.back() == '/') o.pop_back();  // "http://host/" as browsers omit it
    const size_t scheme = o.find("://");
    const bool ok = scheme != std::string::npos && scheme > 0 && o.size() > scheme + 3 &&
                    o.find_first_of(" /\t", scheme + 3) == std::string::npos;
    if (!ok) {
      throw Error("--allowed-origins: \"" + o +
                  "\" is not an origin: give \"*\" or a comma list of SCHEME://HOST[:PORT] "
                  "(e.g. https://app.example.com,http://localhost:3000)");
    }
    p.origins.push_back(o);
  }
  return p;
}

std::optional<std::string> cors_allow_origin(const CorsPolicy& policy, const std::string& origin) {
  if (origin.empty() || !policy.enabled()) return std::nullopt;
  if (policy.any) return std::string("*");
  for (const std::string& o : policy.origins)
    if (o == origin) return origin;
  return std::nullopt;
}

RequestIdChoice choose_request_id(const std::string* header) {
  RequestIdChoice c;
  if (header == nullptr) {
    c.id = generate_request_id();
    return c;
  }
  if (header->size() > kMaxRequestIdHeaderBytes) {
    c.id = generate_request_id();
    c.replaced_because = "X-Request-Id of " + std::to_string(header->size()) + " bytes";
    c.error = api_error(ErrorCode::kInvalidRequest,
                        "X-Request-Id must be at most " + std::to_string(kMaxRequestIdChars) +
                            " characters of [A-Za-z0-9._:-] (got " +
                            std::to_string(header->size()) + " bytes)",
                        "X-Request-Id");
    return c;
  }
  const std::string problem = request_id_problem(*header);
  if (problem.empty()) {
    c.id = *header;
  } else {
    c.id = generate_request_id();
    c.replaced_because = "X-Request-Id " + problem;
  }
  return c;
}

HttpOps::HttpOps(HttpOpsOptions opts)
    : opts_(std::move(opts)),
      keys_(opts_.api_key, opts_.api_key_file),
      log_(opts_.access_log, opts_.log_fd) {
  reloader_ = std::make_unique<KeyReloader>(
      keys_, [this](const std::string& what) { log_.note("", what); });
}

HttpOps::~HttpOps() = default;

std::optional<ApiError> HttpOps::check_key(const std::string& authorization) const {
  if (!keys_.required()) return std::nullopt;
  const std::string prefix = "Bearer ";
  if (authorization.rfind(prefix, 0) == 0 && keys_.matches(authorization.substr(prefix.size())))
    return std::nullopt;
  return api_error(ErrorCode::kInvalidApiKey, authorization.empty()
                                                  ? "missing \"Authorization: Bearer <key>\" header"
                                                  : "invalid API key");
}

void HttpOps::finished(AccessRecord&& r) {
  statuses_.count(r.status);
  log_.record(std::move(r));
}

}  // namespace llama2
