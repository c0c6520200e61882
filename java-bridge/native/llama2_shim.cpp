// libllama2shim: the C ABI of llama2_shim.h over llama2::Client (src/client/client.h).
//
// Every exported function is a try/catch around the C++ call: an exception crossing into the JVM
// (or any C caller) would terminate the process. The handle holds the Client in a shared_ptr so
// that llama2_shim_shutdown() can drop it while other threads are inside calls: each call takes its
// own reference for its duration, and the Client (its socket and reader thread) goes away when the
// last reference does.
#include "llama2_shim.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "client/client.h"
#include "common/check.h"

using nlohmann::json;

namespace {

thread_local std::string t_last_error;

void set_error(const std::string& message) {
  t_last_error = message;
}

// Runs `body`, turning any exception into last_error and `fail_value`.
template <class R, class F>
R guarded(R fail_value, F&& body) noexcept {
  try {
    t_last_error.clear();
    return body();
  } catch (const std::exception& e) {
    try {
      set_error(e.what());
    } catch (...) {
    }
  } catch (...) {
    try {
      set_error("unknown C++ exception in libllama2shim");
    } catch (...) {
    }
  }
  return fail_value;
}

// Event JSON as the caller receives it: UTF-8 as is (not \u-escaped), never throwing.
std::string dump_event(const json& event) {
  return event.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

char* malloc_copy(const std::string& s, int32_t* len_out) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  if (len_out) *len_out = static_cast<int32_t>(s.size());
  return out;
}

json parse_request(const char* request_json) {
  if (!request_json) throw llama2::Error("request JSON is NULL");
  json req = json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) {
    throw llama2::Error("request must be one JSON object (see llama2_shim.h), got: " +
                        std::string(request_json).substr(0, 200));
  }
  return req;
}

// One token event handed to a C callback as bytes + length, with its logprob fields (when the
// request asked for them) as a small JSON object: only those fields, so the caller parses no text.
void call_token_fn(llama2_shim_token_fn fn, void* user, const json& ev) {
  static const std::string kEmpty;
  auto it = ev.find("text");
  const std::string& text =
      it != ev.end() && it->is_string() ? it->get_ref<const std::string&>() : kEmpty;
  std::string logprob;
  const auto lp = ev.find("logprob");
  if (lp != ev.end()) {
    json fields = {{"logprob", *lp}, {"top_logprobs", ev.value("top_logprobs", json::array())}};
    logprob = dump_event(fields);
  }
  fn(user, text.data(), static_cast<int32_t>(text.size()), ev.value("index", -1),
     ev.value("token_id", -1), lp != ev.end() ? logprob.c_str() : nullptr,
     static_cast<int32_t>(logprob.size()));
}

// The per-token logprobs of a streamed request (its token events carry them; its `done` does not),
// added to the final `done` so that a caller of the C ABI gets them without a token callback of
// another shape: "logprobs" [n] and "top_logprobs" [n], as a non-streamed `done` has them.
struct StreamedLogprobs {
  json logprobs = json::array(), top = json::array();
  void add(const json& token_event) {
    const auto it = token_event.find("logprob");
    if (it == token_event.end()) return;
    logprobs.push_back(*it);
    top.push_back(token_event.value("top_logprobs", json::array()));
  }
  void complete(json& done) {
    if (logprobs.empty() || done.value("event", "") != "done" || done.contains("logprobs")) return;
    done["logprobs"] = std::move(logprobs);
    done["top_logprobs"] = std::move(top);
  }
};

// A blocking llama2_shim_generate() in progress. `mu` is held while a callback runs: once the
// waiting thread has set `abandoned` under it, no callback runs any more, so the caller's on_token
// is never called after the function has returned.
struct BlockingCall {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;   // final_event is set
  bool aborted = false;    // llama2_shim_shutdown() ran: stop waiting
  bool abandoned = false;  // the waiter has returned: drop every later event
  json final_event;
  std::string text;  // streamed pieces, concatenated
  std::vector<int32_t> token_ids;
  llama2_shim_token_fn on_token = nullptr;
  void* user = nullptr;
  StreamedLogprobs logprobs;
};

}  // namespace

struct llama2_shim_client {
  std::string path;
  std::mutex mu;                           // guards everything below
  std::shared_ptr<llama2::Client> client;  // null once shut down
  // Blocking generates to wake on shutdown.
  std::unordered_set<std::shared_ptr<BlockingCall>> waiting;

  std::shared_ptr<llama2::Client> acquire() {
    std::lock_guard<std::mutex> lock(mu);
    return client;
  }
  std::string closed_message() const {
    return "connection to llama2 server at '" + path + "' lost: closed by the client";
  }
};

namespace {

llama2_shim_client& checked(llama2_shim_client* h) {
  if (!h) throw llama2::Error("llama2 shim handle is NULL");
  return *h;
}

// Copies the request id, given or assigned, to the caller's buffer.
void copy_id(const std::string& id, char* id_out, int32_t id_out_size) {
  if (!id_out) return;
  if (id_out_size <= 0 || static_cast<size_t>(id_out_size) <= id.size()) {
    throw llama2::Error("id_out buffer of " + std::to_string(id_out_size) + " bytes is too small");
  }
  std::memcpy(id_out, id.c_str(), id.size() + 1);
}

std::string ensure_id(json& req, llama2::Client* client) {
  auto it = req.find("id");
  if (it == req.end()) {
    req["id"] = client ? client->next_id() : std::string("closed");
    return req["id"].get<std::string>();
  }
  if (!it->is_string()) throw llama2::Error("request \"id\" must be a string");
  return it->get<std::string>();
}

json blocking_generate(llama2_shim_client& h, json req, int32_t timeout_ms,
                       llama2_shim_token_fn on_token, void* user) {
  auto call = std::make_shared<BlockingCall>();
  std::shared_ptr<llama2::Client> client;
  {
    // Taken and registered at once, so that a shutdown either comes before (no client) or sees
    // this call in `waiting`.
    std::lock_guard<std::mutex> lock(h.mu);
    client = h.client;
    if (client) h.waiting.insert(call);
  }
  struct Unregister {
    llama2_shim_client& h;
    std::shared_ptr<BlockingCall> c;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(h.mu);
      h.waiting.erase(c);
    }
  } unregister{h, call};
  const std::string id = ensure_id(req, client.get());
  if (!client) return llama2::client_error_event(id, "server_unavailable", h.closed_message());

  call->on_token = on_token;
  call->user = user;
  llama2::GenerateEvents ev;
  ev.on_token = [call](const json& e) {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->abandoned) return;
    auto it = e.find("text");
    if (it != e.end() && it->is_string()) call->text += it->get_ref<const std::string&>();
    call->token_ids.push_back(e.value("token_id", -1));
    call->logprobs.add(e);
    if (call->on_token) call_token_fn(call->on_token, call->user, e);
  };
  ev.on_done = [call](const json& e) {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->abandoned) return;
    call->final_event = e;
    call->finished = true;
    call->cv.notify_all();
  };
  ev.on_error = ev.on_done;

  client->generate_async(req, ev);  // throws only for local misuse; no callback then

  std::unique_lock<std::mutex> lock(call->mu);
  auto over = [&] { return call->finished || call->aborted; };
  if (timeout_ms > 0) {
    call->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), over);
  } else {
    call->cv.wait(lock, over);
  }
  call->abandoned = true;  // from here on no callback touches the caller's on_token or `call`
  if (call->finished) {
    json done = std::move(call->final_event);
    if (done.value("event", "") == "done" && !done.contains("text")) {
      done["text"] = std::move(call->text);
      done["token_ids"] = std::move(call->token_ids);
      call->logprobs.complete(done);
    }
    return done;
  }
  const bool aborted = call->aborted;
  lock.unlock();
  if (aborted) return llama2::client_error_event(id, "server_unavailable", h.closed_message());
  client->cancel(id);  // the server frees the sequence; its late events are dropped above
  return llama2::client_error_event(
      id, "timeout",
      "no done event within " + std::to_string(timeout_ms) + " ms; the generation was cancelled");
}

}  // namespace

extern "C" {

int32_t llama2_shim_abi_version(void) {
  return LLAMA2_SHIM_ABI_VERSION;
}

llama2_shim_client* llama2_shim_connect(const char* socket_path, int32_t timeout_ms) {
  return guarded<llama2_shim_client*>(nullptr, [&]() -> llama2_shim_client* {
    if (!socket_path) throw llama2::Error("socket path is NULL");
    auto h = std::make_unique<llama2_shim_client>();
    h->path = socket_path;
    h->client = std::shared_ptr<llama2::Client>(llama2::Client::connect(socket_path, timeout_ms));
    return h.release();
  });
}

void llama2_shim_shutdown(llama2_shim_client* h) {
  guarded<int>(0, [&] {
    std::shared_ptr<llama2::Client> old;
    std::unordered_set<std::shared_ptr<BlockingCall>> waiting;
    {
      std::lock_guard<std::mutex> lock(checked(h).mu);
      old = std::move(h->client);
      waiting = h->waiting;
    }
    // Not under h->mu: a token callback holds its call's mu and may call llama2_shim_cancel(),
    // which takes h->mu.
    for (const auto& c : waiting) {
      std::lock_guard<std::mutex> call_lock(c->mu);
      c->aborted = true;
      c->cv.notify_all();
    }
    // Outside the lock: when this is the last reference, ~Client closes the socket and joins the
    // reader, whose final callbacks (server_unavailable) may call back into this handle.
    old.reset();
    return 0;
  });
}

void llama2_shim_close(llama2_shim_client* h) {
  if (!h) return;
  llama2_shim_shutdown(h);
  guarded<int>(0, [&] {
    delete h;
    return 0;
  });
}

int32_t llama2_shim_generate_async(llama2_shim_client* h, const char* request_json,
                                   llama2_shim_token_fn on_token, llama2_shim_final_fn on_final,
                                   void* user, char* id_out, int32_t id_out_size) {
  return guarded<int32_t>(-1, [&]() -> int32_t {
    llama2_shim_client& hc = checked(h);
    if (!on_final) throw llama2::Error("on_final callback is NULL");
    json req = parse_request(request_json);
    std::shared_ptr<llama2::Client> client = hc.acquire();
    const std::string id = ensure_id(req, client.get());
    copy_id(id, id_out, id_out_size);
    if (!client) {
      const std::string e =
          dump_event(llama2::client_error_event(id, "server_unavailable", hc.closed_message()));
      on_final(user, e.c_str(), static_cast<int32_t>(e.size()));
      return 0;
    }
    llama2::GenerateEvents ev;
    // Token events and the final one come on the reader thread, in order: no lock needed.
    auto logprobs = std::make_shared<StreamedLogprobs>();
    ev.on_token = [on_token, user, logprobs](const json& e) {
      logprobs->add(e);
      if (on_token) call_token_fn(on_token, user, e);
    };
    ev.on_done = [on_final, user, logprobs](const json& e) {
      json final_event = e;
      logprobs->complete(final_event);
      const std::string s = dump_event(final_event);
      on_final(user, s.c_str(), static_cast<int32_t>(s.size()));
    };
    ev.on_error = ev.on_done;
    client->generate_async(req, std::move(ev));
    return 0;
  });
}

char* llama2_shim_generate(llama2_shim_client* h, const char* request_json, int32_t timeout_ms,
                           llama2_shim_token_fn on_token, void* user, int32_t* len_out) {
  return guarded<char*>(nullptr, [&] {
    llama2_shim_client& hc = checked(h);
    json req = parse_request(request_json);
    return malloc_copy(
        dump_event(blocking_generate(hc, std::move(req), timeout_ms, on_token, user)), len_out);
  });
}

int32_t llama2_shim_cancel(llama2_shim_client* h, const char* id) {
  return guarded<int32_t>(-1, [&]() -> int32_t {
    llama2_shim_client& hc = checked(h);
    if (!id) throw llama2::Error("request id is NULL");
    std::shared_ptr<llama2::Client> client = hc.acquire();
    if (client) client->cancel(id);
    return 0;
  });
}

char* llama2_shim_health(llama2_shim_client* h, int32_t timeout_ms, int32_t* len_out) {
  return guarded<char*>(nullptr, [&] {
    llama2_shim_client& hc = checked(h);
    std::shared_ptr<llama2::Client> client = hc.acquire();
    const json r =
        client ? client->health(timeout_ms)
               : llama2::client_error_event(nullptr, "server_unavailable", hc.closed_message());
    return malloc_copy(dump_event(r), len_out);
  });
}

char* llama2_shim_stats(llama2_shim_client* h, int32_t timeout_ms, int32_t* len_out) {
  return guarded<char*>(nullptr, [&] {
    llama2_shim_client& hc = checked(h);
    std::shared_ptr<llama2::Client> client = hc.acquire();
    if (!client) throw llama2::Error("server_unavailable: " + hc.closed_message());
    return malloc_copy(client->stats(timeout_ms), len_out);
  });
}

int32_t llama2_shim_connected(llama2_shim_client* h) {
  return guarded<int32_t>(0, [&]() -> int32_t {
    std::shared_ptr<llama2::Client> client = checked(h).acquire();
    return client && client->connected() ? 1 : 0;
  });
}

void llama2_shim_free(char* s) {
  std::free(s);
}

const char* llama2_shim_last_error(void) {
  return t_last_error.c_str();
}

}  // extern "C"
