// The serve `token` event is serialized by hand on rank 0's hot path
// (SocketServer::token_event); it must stay byte-identical to dumping the equivalent JSON object,
// escaping included, for any piece the detokenizer can produce.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/serving/socket_server.h"

using nlohmann::json;

namespace {
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
}  // namespace

TEST_CASE("token_event matches the dumped JSON object") {
  const std::string pieces[] = {
      "",                                                 // EOS and stop-held tokens emit nothing
      " hello",                                           // plain SentencePiece piece
      "say \"hi\"\\ now",                                 // quote and backslash
      "line\nbreak\ttab\r",                               // control characters
      std::string("nul\0byte", 8),                        // an embedded NUL (byte fallback tokens)
      "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",  // 2-, 3- and 4-byte UTF-8
      "bad \xff\xfe utf8",  // invalid UTF-8: replaced by U+FFFD, as the library does
  };
  const std::string ids[] = {"req-1", "quote\"id", "\xe2\x82\xac"};
  for (const std::string& id : ids) {
    for (const std::string& piece : pieces) {
      for (const int index : {0, 7, 4095}) {
        const int token = index * 3 + 1;
        const json object{
            {"event", "token"}, {"id", id}, {"index", index}, {"token_id", token}, {"text", piece}};
        const std::string got =
            llama2::SocketServer::token_event(dump(json(id)), index, token, piece);
        CHECK(got == dump(object));
        CHECK(json::parse(got)["text"] == json::parse(dump(object))["text"]);
      }
    }
  }
}
