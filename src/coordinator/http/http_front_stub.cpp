// The HTTP front of a build without cpp-httplib: serve refuses --http before it gets here.
#include "common/check.h"
#include "coordinator/http/http_front.h"

namespace llama2 {

struct HttpFront::Impl {};

bool http_front_available() {
  return false;
}

HttpFront::HttpFront(HttpOptions) {
  throw Error(
      "--http: this llama2 was built without cpp-httplib (install libcpp-httplib-dev, or "
      "configure with -DLLAMA2_HTTPLIB_DIR=DIR holding httplib.h, and rebuild)");
}
HttpFront::~HttpFront() = default;
void HttpFront::start() {}
void HttpFront::attach(HttpDeps) {}
int HttpFront::port() const {
  return 0;
}
int HttpFront::reload_fd() const {
  return -1;
}
void HttpFront::stop(int) {}

}  // namespace llama2
