package dev.llama2;

/**
 * Receives the tokens of a streamed generation ({@link Llama2Client#stream}).
 *
 * <p>Runs on the connection's reader thread, one call at a time in order: keep it short (a slow
 * listener delays every generation of the same client), and do not call the blocking methods of the
 * client from it ({@code generate}, {@code health}); {@code cancel} is fine. Exceptions it throws
 * are logged (WARNING, with the exception) to the {@code dev.llama2} {@link System.Logger} and
 * otherwise ignored: the generation goes on.
 *
 * <p>A lambda implements the three-argument {@link #onToken(String, int, int)}. To receive each
 * token's log-probability as it arrives (a request with {@link GenerationParams.Builder#logprobs}),
 * implement {@link WithLogprobs} instead, e.g. with {@link #withLogprobs}:
 *
 * <pre>{@code
 * client.stream("The cache", params.toBuilder().logprobs(true).topLogprobs(3).build(),
 *     TokenListener.withLogprobs((text, index, tokenId, logprob) ->
 *         System.out.println(text + " " + logprob.logprob() + " " + logprob.top())));
 * }</pre>
 */
@FunctionalInterface
public interface TokenListener {
  /**
   * One token. {@code text} is decoded from complete UTF-8 and may be empty (a character not
   * finished yet, or text held back because it may start a stop string); {@code index} counts from
   * 0 without gaps.
   */
  void onToken(String text, int index, int tokenId);

  /**
   * One token with its log-probability: what the client calls. {@code logprob} is the token's
   * {@link TokenLogprob} (the same values as its entry of {@link Completion#logprobs()}) when the
   * request asked for logprobs, else null. By default it calls
   * {@link #onToken(String, int, int)}.
   */
  default void onToken(String text, int index, int tokenId, TokenLogprob logprob) {
    onToken(text, index, tokenId);
  }

  /** A listener whose lambda takes the token's {@link TokenLogprob} too (null when not asked). */
  @FunctionalInterface
  interface WithLogprobs extends TokenListener {
    @Override
    void onToken(String text, int index, int tokenId, TokenLogprob logprob);

    @Override
    default void onToken(String text, int index, int tokenId) {
      onToken(text, index, tokenId, null);
    }
  }

  /** {@code listener} as a TokenListener: lets a four-argument lambda be passed to stream(). */
  static TokenListener withLogprobs(WithLogprobs listener) {
    return listener;
  }
}
