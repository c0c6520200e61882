// The HTTP front's access checks, built with or without cpp-httplib (serve validates --http
// before the engine opens; the unit tests run them).
#include <cstdint>
#include <string>

#include "coordinator/http/http_front.h"

namespace llama2 {

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  return host.rfind("127.", 0) == 0;
}

bool same_secret(const std::string& presented, const std::string& key) {
  // Every byte of the key is compared whatever came before; a length mismatch only sets a bit.
  uint8_t diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    const uint8_t p = i < presented.size() ? static_cast<uint8_t>(presented[i]) : 0;
    diff |= static_cast<uint8_t>(p ^ static_cast<uint8_t>(key[i]));
  }
  return diff == 0;
}

}  // namespace llama2
