package dev.llama2;

/**
 * Receives the tokens of a streamed generation ({@link Llama2Client#stream}).
 *
 * <p>Runs on the connection's reader thread, one call at a time in order: keep it short (a slow
 * listener delays every generation of the same client), and do not call the blocking methods of the
 * client from it ({@code generate}, {@code health}); {@code cancel} is fine. Exceptions it throws
 * are logged to stderr and ignored.
 */
@FunctionalInterface
public interface TokenListener {
  /**
   * One token. {@code text} is decoded from complete UTF-8 and may be empty (a character not
   * finished yet, or text held back because it may start a stop string); {@code index} counts from
   * 0 without gaps.
   */
  void onToken(String text, int index, int tokenId);
}
