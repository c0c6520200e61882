package dev.llama2;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Turns the engine's final events into a {@link Completion} or the typed exception. */
final class Events {
  private Events() {}

  /**
   * The completion of a {@code done} event, or the exception of an {@code error} event (or of a
   * {@code done} with {@code finish_reason: "timeout"}). {@code text}/{@code tokenIds}: what the
   * token events carried, used when the event has no {@code text} (streamed requests).
   */
  static Completion completion(Map<String, Object> ev, String text, List<Integer> tokenIds) {
    String type = Json.str(ev, "event", "");
    String id = Json.str(ev, "id", null);
    if (type.equals("error")) {
      throw Llama2Exception.fromCode(Json.str(ev, "code", "internal"), Json.str(ev, "message", ""), id);
    }
    if (!type.equals("done")) {
      throw new Llama2Exception("internal", "unexpected final event: " + ev, id);
    }
    Object t = ev.get("text");
    String fullText = t instanceof String ? (String) t : (text == null ? "" : text);
    List<Integer> ids = tokenIds == null ? List.of() : tokenIds;
    if (ev.get("token_ids") instanceof List) {
      ids = new ArrayList<>();
      for (Object o : (List<?>) ev.get("token_ids")) ids.add(((Number) o).intValue());
    }
    Map<String, Object> usage = Json.obj(ev, "usage");
    Map<String, Object> timings = Json.obj(ev, "timings");
    Completion c = new Completion(id, fullText, ids,
        FinishReason.parse(Json.str(ev, "finish_reason", null)),
        (int) Json.num(usage, "prompt_tokens", -1), (int) Json.num(usage, "completion_tokens", ids.size()),
        Json.num(ev, "seed", 0),
        new Timings(Json.dbl(timings, "queue_s", 0), Json.dbl(timings, "time_to_first_token_s", 0),
            Json.dbl(timings, "total_s", 0)),
        logprobs(ev, ids), toolCalls(ev));
    if (c.finishReason() == FinishReason.TIMEOUT) {
      throw new GenerationTimeoutException("generation '" + id + "' timed out after "
          + c.completionTokens() + " tokens (" + c.timings().totalSeconds() + " s)", id, c);
    }
    return c;
  }

  /** The {@code done} event's {@code tool_calls} ([{"id", "type", "function": {"name",
   * "arguments"}}]), or an empty list. */
  static List<ToolCall> toolCalls(Map<String, Object> ev) {
    if (!(ev.get("tool_calls") instanceof List)) return List.of();
    List<ToolCall> out = new ArrayList<>();
    for (Object o : (List<?>) ev.get("tool_calls")) {
      @SuppressWarnings("unchecked")
      Map<String, Object> call = (Map<String, Object>) o;
      Map<String, Object> f = Json.obj(call, "function");
      out.add(new ToolCall(Json.str(call, "id", ""), Json.str(f, "name", ""),
          Json.str(f, "arguments", "{}")));
    }
    return out;
  }

  /**
   * The per-token logprobs of a {@code done} event ("logprobs": [n] numbers, "top_logprobs": [n]
   * arrays of {"token_id", "logprob"}; the shim adds them to a streamed request's event too), or
   * an empty list when the request did not ask.
   */
  static List<TokenLogprob> logprobs(Map<String, Object> ev, List<Integer> ids) {
    if (!(ev.get("logprobs") instanceof List)) return List.of();
    List<?> lp = (List<?>) ev.get("logprobs");
    List<?> top = ev.get("top_logprobs") instanceof List ? (List<?>) ev.get("top_logprobs") : List.of();
    List<TokenLogprob> out = new ArrayList<>();
    for (int i = 0; i < lp.size() && i < ids.size(); i++) {
      out.add(tokenLogprob(ids.get(i), lp.get(i), i < top.size() ? top.get(i) : null));
    }
    return out;
  }

  /**
   * The logprob of one token from a token event's fields ({@code "logprob": x, "top_logprobs":
   * [{"token_id", "logprob"}, ...]}; the shim hands a streamed token exactly these), or null when
   * the event has no {@code logprob} (the request did not ask).
   */
  static TokenLogprob tokenLogprob(Map<String, Object> fields, int tokenId) {
    if (!fields.containsKey("logprob")) return null;
    return tokenLogprob(tokenId, fields.get("logprob"), fields.get("top_logprobs"));
  }

  private static TokenLogprob tokenLogprob(int tokenId, Object logprob, Object top) {
    List<TokenLogprob.Alternative> alts = new ArrayList<>();
    if (top instanceof List) {
      for (Object o : (List<?>) top) {
        @SuppressWarnings("unchecked")
        Map<String, Object> a = (Map<String, Object>) o;
        alts.add(new TokenLogprob.Alternative((int) Json.num(a, "token_id", -1),
            Json.dbl(a, "logprob", Double.NaN)));
      }
    }
    return new TokenLogprob(tokenId,
        logprob instanceof Number ? ((Number) logprob).doubleValue() : Double.NaN, alts);
  }
}
