package dev.llama2;

/**
 * One generated token, as {@link Llama2Client#publisher} publishes it.
 *
 * @param text    its text piece, decoded from complete UTF-8; may be empty (see {@link TokenListener})
 * @param index   its position in the generation, from 0 without gaps
 * @param tokenId its id in the model's vocabulary
 * @param logprob its log-probability when the request asked for logprobs, else null
 */
public record Token(String text, int index, int tokenId, TokenLogprob logprob) {}
