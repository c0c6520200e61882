/* libllama2shim: a plain C ABI over the C++ client of `llama2 serve` (src/client/client.h), made
 * to be called through JNA (java-bridge/src/main/java/dev/llama2/) or any other FFI.
 *
 * Contract of every function:
 *  - No C++ exception ever leaves it (each body catches everything and reports through the
 *    return value and llama2_shim_last_error()).
 *  - Nothing process-wide is touched: no signal handlers (the client sends with MSG_NOSIGNAL, so a
 *    vanished server gives EPIPE, never SIGPIPE), no environment, no stdio redirection.
 *  - Strings are NUL-terminated UTF-8. Text handed to callbacks comes as bytes + length and is
 *    complete UTF-8 (docs/PROTOCOL.md); the pointers are valid only during the callback.
 *  - Only the symbols declared here are exported (the library is built with hidden visibility and
 *    a version script).
 *
 * Threading: one handle may be used by many threads at once (generations are multiplexed on one
 * connection). Callbacks run on the handle's reader thread (one per handle), one at a time, in
 * arrival order; a slow callback delays every generation of that handle. A callback may call
 * llama2_shim_cancel() and llama2_shim_generate_async(), but not the blocking functions
 * (llama2_shim_generate, _health, _stats): the reader would wait on itself.
 *
 * Errors: a function that fails locally (NULL or -1) stores a message in a thread-local buffer,
 * read with llama2_shim_last_error() on the same thread right after the call. Thread-local rather
 * than per handle because many threads share a handle: a per-handle slot would be overwritten by
 * another thread's failure between the call and the read. Protocol failures are not local
 * failures: they arrive as `{"event":"error","code":...}` JSON (docs/PROTOCOL.md codes plus the
 * client-side `server_unavailable` and `timeout` of src/client/client.h).
 *
 * Request JSON (llama2_shim_generate / _generate_async): one object with the keys of the protocol's
 * `generate` request, "op" optional, e.g.
 *     {"prompt": "Hello", "max_new_tokens": 64, "temperature": 0.7, "seed": 42, "stop": ["\n\n"],
 *      "stream": true, "timeout_ms": 30000}
 * "id" is optional: when absent the shim assigns a process-unique one ("c<pid>-<n>"), which
 * llama2_shim_generate_async() copies to id_out so the caller can cancel.
 */
#ifndef LLAMA2_SHIM_H_
#define LLAMA2_SHIM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LLAMA2_SHIM_BUILD)
#define LLAMA2_SHIM_API __attribute__((visibility("default")))
#else
#define LLAMA2_SHIM_API
#endif

/* Bumped on any incompatible change of this header; the Java side refuses another version. */
#define LLAMA2_SHIM_ABI_VERSION 2

typedef struct llama2_shim_client llama2_shim_client; /* opaque */

/* One token: `text` holds `len` bytes of UTF-8 (len may be 0: a character not finished yet, or
 * text held back because it may start a stop string); `index` counts from 0 without gaps.
 * When the request asked for "logprobs", `logprob_json` holds `logprob_len` bytes (also
 * NUL-terminated) of a JSON object with the token event's logprob fields, e.g.
 *     {"logprob": -0.0123, "top_logprobs": [{"logprob": -0.0123, "token_id": 450}, ...]}
 * (docs/PROTOCOL.md); otherwise it is NULL and logprob_len 0. (ABI version 2 added them.) */
typedef void (*llama2_shim_token_fn)(void* user, const char* text, int32_t len, int32_t index,
                                     int32_t token_id, const char* logprob_json,
                                     int32_t logprob_len);

/* The final event of a generation, exactly once, last: the `done` or `error` event as JSON
 * (`len` bytes, also NUL-terminated). For a request with "logprobs" the `done` carries the
 * per-token "logprobs" and "top_logprobs" arrays also when it streamed (gathered from its token
 * events; docs/PROTOCOL.md). */
typedef void (*llama2_shim_final_fn)(void* user, const char* event_json, int32_t len);

LLAMA2_SHIM_API int32_t llama2_shim_abi_version(void);

/* Connects to the Unix socket of `llama2 serve`, waiting at most timeout_ms (> 0). NULL on failure
 * (last_error says why; "server not running?" when nobody listens there). */
LLAMA2_SHIM_API llama2_shim_client* llama2_shim_connect(const char* socket_path,
                                                        int32_t timeout_ms);

/* Ends the connection without freeing the handle: every generation in flight gets its final
 * `server_unavailable` error, blocking llama2_shim_generate() calls in progress on other threads
 * return at once, and every later call fails the same way. Safe while other threads are inside
 * calls on `h`; idempotent. (health/stats calls already waiting return at their own timeout.) */
LLAMA2_SHIM_API void llama2_shim_shutdown(llama2_shim_client* h);

/* llama2_shim_shutdown(), then frees the handle. No other call on `h` may be in progress or start
 * afterwards (use llama2_shim_shutdown() first to make calls in progress return). NULL is a no-op.
 * Must not be called from a callback. */
LLAMA2_SHIM_API void llama2_shim_close(llama2_shim_client* h);

/* Starts a generation. 0: sent (or the connection was already gone, in which case on_final has
 * already run on this thread with `server_unavailable`); on_token (may be NULL) then runs for each
 * token and on_final exactly once. -1: local failure (bad JSON, bad/duplicate id, request above the
 * 1 MiB frame limit, id_out too small); no callback runs. The request id (given or assigned) is
 * copied NUL-terminated to id_out when id_out is not NULL (id_out_size >= 129 always suffices). */
LLAMA2_SHIM_API int32_t llama2_shim_generate_async(llama2_shim_client* h, const char* request_json,
                                                   llama2_shim_token_fn on_token,
                                                   llama2_shim_final_fn on_final, void* user,
                                                   char* id_out, int32_t id_out_size);

/* Blocking generate. Returns the final event as JSON (malloc'd, free with llama2_shim_free; its
 * byte length, without the NUL, in *len_out when len_out is not NULL):
 *  - `done`: always carries the whole "text" and "token_ids" (assembled from the token events when
 *    the request streamed, i.e. "stream" was not false), and with "logprobs" the per-token
 *    "logprobs" and "top_logprobs";
 *  - `error`: the server's codes, or client-side `server_unavailable` / `timeout`.
 * timeout_ms <= 0: no client-side deadline (the server's request timeout still applies); when it
 * passes, a `cancel` is sent and `timeout` returned. on_token (may be NULL) runs on the reader
 * thread and never after this function has returned. NULL only on local failure (see
 * generate_async). */
LLAMA2_SHIM_API char* llama2_shim_generate(llama2_shim_client* h, const char* request_json,
                                           int32_t timeout_ms, llama2_shim_token_fn on_token,
                                           void* user, int32_t* len_out);

/* Asks the server to end generation `id` (finishes with done / "cancelled"). 0: sent, or nothing to
 * do because the connection is gone; -1: bad id (last_error). */
LLAMA2_SHIM_API int32_t llama2_shim_cancel(llama2_shim_client* h, const char* id);

/* The server's `health` event as JSON, or an error event (server_unavailable, timeout). Free with
 * llama2_shim_free. NULL only on local failure. */
LLAMA2_SHIM_API char* llama2_shim_health(llama2_shim_client* h, int32_t timeout_ms,
                                         int32_t* len_out);

/* The Prometheus text of the `stats` event; NULL with last_error "<code>: <message>" otherwise. */
LLAMA2_SHIM_API char* llama2_shim_stats(llama2_shim_client* h, int32_t timeout_ms,
                                        int32_t* len_out);

/* 1 while the connection is up, 0 once it is gone (every later request then fails). */
LLAMA2_SHIM_API int32_t llama2_shim_connected(llama2_shim_client* h);

/* Frees a string returned by this library. NULL is a no-op. */
LLAMA2_SHIM_API void llama2_shim_free(char* s);

/* The message of this thread's last local failure ("" if none). Valid until the next call of this
 * library on this thread. */
LLAMA2_SHIM_API const char* llama2_shim_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* LLAMA2_SHIM_H_ */
