package dev.llama2;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Sampling parameters and limits of one generation. Immutable; build with {@link #builder()}.
 *
 * <p>Defaults and ranges are those of {@code llama2 generate} (docs/cli.md): temperature 1.0 (>= 0,
 * 0 = greedy), top_p 1.0 (in (0, 1]), top_k 0 (>= 0, 0 = off), repetition_penalty 1.0 (> 0),
 * presence_penalty and frequency_penalty 0.0 (in [-2, 2], OpenAI's: a generated token's logit is
 * lowered by presence + frequency x its count so far),
 * max_new_tokens 128 (>= 1), seed random (reported in {@link Completion#seed()}), no stop strings,
 * ignore_eos false, no logprobs (top_logprobs in [0, 20], only with logprobs). The builder refuses out-of-range values at once with an
 * {@link IllegalArgumentException} naming the parameter, the value and the allowed range.
 *
 * <p>{@link Builder#timeout} bounds the whole generation (queue time included); when it passes the
 * call fails with {@link GenerationTimeoutException}. Without it the server's
 * {@code --request-timeout-ms} applies.
 */
public final class GenerationParams {
  private static final GenerationParams DEFAULTS = new Builder().build();

  private final double temperature;
  private final double topP;
  private final int topK;
  private final double repetitionPenalty;
  private final double presencePenalty;
  private final double frequencyPenalty;
  private final int maxNewTokens;
  private final Long seed;
  private final List<String> stop;
  private final boolean ignoreEos;
  private final boolean logprobs;
  private final int topLogprobs;
  private final Duration timeout;

  private GenerationParams(Builder b) {
    temperature = b.temperature;
    topP = b.topP;
    topK = b.topK;
    repetitionPenalty = b.repetitionPenalty;
    presencePenalty = b.presencePenalty;
    frequencyPenalty = b.frequencyPenalty;
    maxNewTokens = b.maxNewTokens;
    seed = b.seed;
    stop = List.copyOf(b.stop);
    ignoreEos = b.ignoreEos;
    logprobs = b.logprobs;
    topLogprobs = b.topLogprobs;
    timeout = b.timeout;
  }

  /** The CLI's defaults. */
  public static GenerationParams defaults() {
    return DEFAULTS;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** A builder starting from these values. */
  public Builder toBuilder() {
    Builder b = new Builder();
    b.temperature = temperature;
    b.topP = topP;
    b.topK = topK;
    b.repetitionPenalty = repetitionPenalty;
    b.presencePenalty = presencePenalty;
    b.frequencyPenalty = frequencyPenalty;
    b.maxNewTokens = maxNewTokens;
    b.seed = seed;
    b.stop.addAll(stop);
    b.ignoreEos = ignoreEos;
    b.logprobs = logprobs;
    b.topLogprobs = topLogprobs;
    b.timeout = timeout;
    return b;
  }

  public double temperature() {
    return temperature;
  }

  public double topP() {
    return topP;
  }

  public int topK() {
    return topK;
  }

  public double repetitionPenalty() {
    return repetitionPenalty;
  }

  public double presencePenalty() {
    return presencePenalty;
  }

  public double frequencyPenalty() {
    return frequencyPenalty;
  }

  public int maxNewTokens() {
    return maxNewTokens;
  }

  /** The seed (unsigned 64-bit bits), or null for a random one chosen by the server. */
  public Long seed() {
    return seed;
  }

  public List<String> stop() {
    return stop;
  }

  public boolean ignoreEos() {
    return ignoreEos;
  }

  /** True when each generated token reports its log-probability ({@link Completion#logprobs()}). */
  public boolean logprobs() {
    return logprobs;
  }

  /** How many most probable alternatives each token reports (0 to 20; needs logprobs). */
  public int topLogprobs() {
    return topLogprobs;
  }

  /** The per-call timeout, or null for the server's request timeout. */
  public Duration timeout() {
    return timeout;
  }

  /** The sampling keys of a protocol {@code generate} request (every key written explicitly). */
  void appendJson(StringBuilder b) {
    b.append("\"temperature\":").append(temperature)
        .append(",\"top_p\":").append(topP)
        .append(",\"top_k\":").append(topK)
        .append(",\"repetition_penalty\":").append(repetitionPenalty)
        .append(",\"presence_penalty\":").append(presencePenalty)
        .append(",\"frequency_penalty\":").append(frequencyPenalty)
        .append(",\"max_new_tokens\":").append(maxNewTokens)
        .append(",\"ignore_eos\":").append(ignoreEos);
    if (seed != null) b.append(",\"seed\":").append(Long.toUnsignedString(seed));
    if (!stop.isEmpty()) {
      b.append(",\"stop\":[");
      for (int i = 0; i < stop.size(); i++) {
        if (i > 0) b.append(',');
        Json.quoteTo(b, stop.get(i));
      }
      b.append(']');
    }
    if (logprobs) b.append(",\"logprobs\":true,\"top_logprobs\":").append(topLogprobs);
    if (timeout != null) b.append(",\"timeout_ms\":").append(timeout.toMillis());
  }

  @Override
  public String toString() {
    StringBuilder b = new StringBuilder("GenerationParams{");
    appendJson(b);
    return b.append('}').toString();
  }

  /** Validates each value as it is set. */
  public static final class Builder {
    private double temperature = 1.0;
    private double topP = 1.0;
    private int topK = 0;
    private double repetitionPenalty = 1.0;
    private double presencePenalty;
    private double frequencyPenalty;
    private int maxNewTokens = 128;
    private Long seed;
    private final List<String> stop = new ArrayList<>();
    private boolean ignoreEos;
    private boolean logprobs;
    private int topLogprobs;
    private Duration timeout;

    private Builder() {}

    /** >= 0; 0 is greedy. */
    public Builder temperature(double v) {
      if (!Double.isFinite(v)) throw bad("temperature must be a finite number >= 0", v);
      if (v < 0) throw bad("temperature must be >= 0", v);
      temperature = v;
      return this;
    }

    /** In (0, 1]; 1 is off. */
    public Builder topP(double v) {
      if (!(v > 0 && v <= 1)) throw bad("top_p must be in (0, 1]", v);
      topP = v;
      return this;
    }

    /** >= 0; 0 is off. */
    public Builder topK(int v) {
      if (v < 0) throw bad("top_k must be >= 0", v);
      topK = v;
      return this;
    }

    /** > 0; 1 is off. */
    public Builder repetitionPenalty(double v) {
      if (!Double.isFinite(v)) throw bad("repetition_penalty must be a finite number > 0", v);
      if (v <= 0) throw bad("repetition_penalty must be > 0", v);
      repetitionPenalty = v;
      return this;
    }

    /** In [-2, 2]; 0 is off. Lowers the logit of every token generated so far by v. */
    public Builder presencePenalty(double v) {
      presencePenalty = penalty("presence_penalty", v);
      return this;
    }

    /** In [-2, 2]; 0 is off. Lowers the logit of every token generated so far by v x its count. */
    public Builder frequencyPenalty(double v) {
      frequencyPenalty = penalty("frequency_penalty", v);
      return this;
    }

    private static double penalty(String name, double v) {
      if (!(v >= -2 && v <= 2)) throw bad(name + " must be in [-2, 2]", v);  // NaN fails too
      return v;
    }

    /** >= 1. */
    public Builder maxNewTokens(int v) {
      if (v < 1) throw bad("max_new_tokens must be >= 1", v);
      maxNewTokens = v;
      return this;
    }

    /** The sampling seed, read as an unsigned 64-bit value (as the CLI's {@code --seed}). */
    public Builder seed(long v) {
      seed = v;
      return this;
    }

    /** Back to a random seed chosen by the server. */
    public Builder randomSeed() {
      seed = null;
      return this;
    }

    /** Adds a stop string (non-empty; not included in the output). */
    public Builder stop(String s) {
      Objects.requireNonNull(s, "stop");
      if (s.isEmpty()) {
        throw new IllegalArgumentException("stop strings must be non-empty (got \"\" at stop["
            + stop.size() + "])");
      }
      if (!Utf8.isWellFormed(s)) {
        throw new IllegalArgumentException("stop strings must be valid Unicode (stop["
            + stop.size() + "] has an unpaired surrogate)");
      }
      stop.add(s);
      return this;
    }

    /** Replaces the stop strings. */
    public Builder stop(List<String> strings) {
      stop.clear();
      for (String s : strings) stop(s);
      return this;
    }

    public Builder ignoreEos(boolean v) {
      ignoreEos = v;
      return this;
    }

    /**
     * Each generated token reports its log-probability under the model's own distribution
     * (log-softmax of the raw logits, before penalties, temperature and truncation).
     */
    public Builder logprobs(boolean v) {
      logprobs = v;
      return this;
    }

    /** With logprobs: each token also reports this many most probable tokens (0 to 20). */
    public Builder topLogprobs(int v) {
      if (v < 0 || v > 20) throw bad("top_logprobs must be in [0, 20]", v);
      topLogprobs = v;
      return this;
    }

    /** Bounds the whole call (queue time included): 1 ms to Integer.MAX_VALUE ms; null: none. */
    public Builder timeout(Duration d) {
      if (d != null && (d.isNegative() || d.isZero() || d.toMillis() > Integer.MAX_VALUE)) {
        throw new IllegalArgumentException("timeout must be in [1 ms, " + Integer.MAX_VALUE
            + " ms] (got " + d + ")");
      }
      timeout = d;
      return this;
    }

    public GenerationParams build() {
      if (topLogprobs > 0 && !logprobs) {
        throw bad("top_logprobs needs logprobs(true)", "top_logprobs " + topLogprobs);
      }
      return new GenerationParams(this);
    }

    private static IllegalArgumentException bad(String rule, Object got) {
      return new IllegalArgumentException(rule + " (got " + got + ")");
    }
  }
}
