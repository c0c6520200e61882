package dev.llama2;

import java.util.List;

/**
 * The log-probability of one generated token and its step's most probable alternatives, under the
 * model's own distribution (log-softmax of the raw logits, before penalties, temperature and top-k
 * / top-p; docs/PROTOCOL.md). Present in {@link Completion#logprobs()} when the request asked with
 * {@link GenerationParams.Builder#logprobs}.
 *
 * @param tokenId the generated token
 * @param logprob its natural-log probability (<= 0)
 * @param top     the {@link GenerationParams#topLogprobs()} most probable tokens of that step, most
 *                probable first (equal values by lower id); may include {@code tokenId}
 */
public record TokenLogprob(int tokenId, double logprob, List<Alternative> top) {
  public TokenLogprob {
    top = List.copyOf(top);
  }

  /** One alternative: a token id and its log-probability. */
  public record Alternative(int tokenId, double logprob) {}
}
