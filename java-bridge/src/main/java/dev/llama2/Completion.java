package dev.llama2;

import java.util.List;

/**
 * A finished generation.
 *
 * @param requestId        the protocol id of the request
 * @param text             the generated text (stop strings excluded), decoded from UTF-8
 * @param tokenIds         the generated token ids
 * @param finishReason     why it ended
 * @param promptTokens     tokens in the prompt (BOS included)
 * @param completionTokens tokens generated (the token count)
 * @param seed             the sampling seed used, an unsigned 64-bit value: pass it back with
 *                         {@link GenerationParams.Builder#seed} (or {@code llama2 generate --seed
 *                         Long.toUnsignedString(seed)}) to reproduce the output
 * @param timings          server-side queue, time-to-first-token and total time
 * @param logprobs         one entry per generated token when the request asked for logprobs
 *                         ({@link GenerationParams.Builder#logprobs}), else empty
 * @param toolCalls        the calls of an answer that is a complete tool call (a chat request
 *                         with {@link GenerationParams.Builder#tools}; {@code text} then holds
 *                         the call's raw text), else empty
 */
public record Completion(String requestId, String text, List<Integer> tokenIds,
                         FinishReason finishReason, int promptTokens, int completionTokens,
                         long seed, Timings timings, List<TokenLogprob> logprobs,
                         List<ToolCall> toolCalls) {
  public Completion {
    tokenIds = List.copyOf(tokenIds);
    logprobs = List.copyOf(logprobs);
    toolCalls = List.copyOf(toolCalls);
  }

  /** True when the answer is a tool call ({@link #toolCalls()} not empty). */
  public boolean hasToolCalls() {
    return !toolCalls.isEmpty();
  }

  /** The seed as the CLI prints it (unsigned decimal). */
  public String seedString() {
    return Long.toUnsignedString(seed);
  }
}
