package dev.llama2;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;

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
 * <p>vLLM's token-level parameters (docs/PROTOCOL.md): logit_bias (token id to a bias in
 * [-100, 100]), stop_token_ids, min_tokens (>= 0), min_p (in [0, 1], 0 = off),
 * include_stop_str_in_output (false), skip_special_tokens (true); the server checks token ids
 * against its vocabulary. Output constraints: {@link Builder#responseFormat}; tools for chat
 * requests: {@link Builder#tools}, {@link Builder#toolChoice}, {@link Builder#parallelToolCalls}
 * (docs/tool-calling.md).
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
  private final Map<Integer, Double> logitBias;
  private final List<Integer> stopTokenIds;
  private final int minTokens;
  private final double minP;
  private final boolean includeStopStrInOutput;
  private final boolean skipSpecialTokens;
  private final ResponseFormat responseFormat;
  private final List<Tool> tools;
  private final ToolChoice toolChoice;
  private final Boolean parallelToolCalls;

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
    logitBias = Collections.unmodifiableMap(new TreeMap<>(b.logitBias));
    stopTokenIds = List.copyOf(b.stopTokenIds);
    minTokens = b.minTokens;
    minP = b.minP;
    includeStopStrInOutput = b.includeStopStrInOutput;
    skipSpecialTokens = b.skipSpecialTokens;
    responseFormat = b.responseFormat;
    tools = List.copyOf(b.tools);
    toolChoice = b.toolChoice;
    parallelToolCalls = b.parallelToolCalls;
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
    b.logitBias.putAll(logitBias);
    b.stopTokenIds.addAll(stopTokenIds);
    b.minTokens = minTokens;
    b.minP = minP;
    b.includeStopStrInOutput = includeStopStrInOutput;
    b.skipSpecialTokens = skipSpecialTokens;
    b.responseFormat = responseFormat;
    b.tools.addAll(tools);
    b.toolChoice = toolChoice;
    b.parallelToolCalls = parallelToolCalls;
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

  /** Token id to the bias added to its logit (in [-100, 100]); empty: none. */
  public Map<Integer, Double> logitBias() {
    return logitBias;
  }

  /** Token ids that end the generation (finish reason stop) when sampled. */
  public List<Integer> stopTokenIds() {
    return stopTokenIds;
  }

  /** EOS and the stop token ids are masked out until this many tokens were generated. */
  public int minTokens() {
    return minTokens;
  }

  /** In [0, 1]; 0 is off. */
  public double minP() {
    return minP;
  }

  /** True: a matched stop string stays at the end of the text. */
  public boolean includeStopStrInOutput() {
    return includeStopStrInOutput;
  }

  /** False: control pieces ({@code <s>}, {@code </s>}) appear in the text. */
  public boolean skipSpecialTokens() {
    return skipSpecialTokens;
  }

  /** The output constraint, or null for none (text). */
  public ResponseFormat responseFormat() {
    return responseFormat;
  }

  /** The functions the model may call (chat only); empty: none. */
  public List<Tool> tools() {
    return tools;
  }

  /** The tool choice, or null for the server's default (auto with tools). */
  public ToolChoice toolChoice() {
    return toolChoice;
  }

  /** Whether an answer may call several tools, or null for the server's default (true). */
  public Boolean parallelToolCalls() {
    return parallelToolCalls;
  }

  /**
   * The sampling keys of a protocol {@code generate} request (every key of the first version
   * written explicitly; the later ones only when they differ from the server's default).
   */
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
    appendExtensions(b);
  }

  /** Issue 35's token-level keys, the output constraint and the tools. */
  private void appendExtensions(StringBuilder b) {
    if (!logitBias.isEmpty()) {
      Map<String, Object> bias = new LinkedHashMap<>();
      logitBias.forEach((id, v) -> bias.put(Integer.toString(id), v));
      b.append(",\"logit_bias\":");
      Json.writeTo(b, bias);
    }
    if (!stopTokenIds.isEmpty()) {
      b.append(",\"stop_token_ids\":");
      Json.writeTo(b, stopTokenIds);
    }
    if (minTokens != 0) b.append(",\"min_tokens\":").append(minTokens);
    if (minP != 0) b.append(",\"min_p\":").append(minP);
    if (includeStopStrInOutput) b.append(",\"include_stop_str_in_output\":true");
    if (!skipSpecialTokens) b.append(",\"skip_special_tokens\":false");
    if (responseFormat != null) {
      b.append(",\"response_format\":");
      Json.writeTo(b, responseFormat.toJson());
    }
    if (!tools.isEmpty()) {
      List<Object> list = new ArrayList<>();
      for (Tool t : tools) list.add(t.toJson());
      b.append(",\"tools\":");
      Json.writeTo(b, list);
    }
    if (toolChoice != null) {
      b.append(",\"tool_choice\":");
      Json.writeTo(b, toolChoice.toJson());
    }
    if (parallelToolCalls != null) b.append(",\"parallel_tool_calls\":").append(parallelToolCalls);
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
    private final Map<Integer, Double> logitBias = new TreeMap<>();
    private final List<Integer> stopTokenIds = new ArrayList<>();
    private int minTokens;
    private double minP;
    private boolean includeStopStrInOutput;
    private boolean skipSpecialTokens = true;
    private ResponseFormat responseFormat;
    private final List<Tool> tools = new ArrayList<>();
    private ToolChoice toolChoice;
    private Boolean parallelToolCalls;

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

    /** Adds {@code bias} (in [-100, 100]) to the logit of {@code tokenId} (OpenAI's logit_bias). */
    public Builder logitBias(int tokenId, double bias) {
      if (tokenId < 0) throw bad("logit_bias keys must be token ids >= 0", tokenId);
      if (!(bias >= -100 && bias <= 100)) {
        throw new IllegalArgumentException("logit_bias values must be in [-100, 100] (got " + bias
            + " for token " + tokenId + ")");
      }
      logitBias.put(tokenId, bias);
      return this;
    }

    /** Replaces the logit biases (token id to bias); ids past the vocabulary: the server refuses. */
    public Builder logitBias(Map<Integer, Double> biases) {
      logitBias.clear();
      biases.forEach((id, v) -> logitBias(Objects.requireNonNull(id, "logit_bias key"),
          Objects.requireNonNull(v, "logit_bias value")));
      return this;
    }

    /** Replaces the token ids that end the generation when sampled (vLLM's stop_token_ids). */
    public Builder stopTokenIds(List<Integer> ids) {
      List<Integer> checked = new ArrayList<>();
      for (Integer id : ids) {
        if (id == null || id < 0) {
          throw bad("stop_token_ids must be token ids >= 0", id + " at stop_token_ids["
              + checked.size() + "]");
        }
        checked.add(id);
      }
      stopTokenIds.clear();
      stopTokenIds.addAll(checked);
      return this;
    }

    /** >= 0: EOS and the stop token ids are masked out until this many tokens were generated. */
    public Builder minTokens(int v) {
      if (v < 0) throw bad("min_tokens must be >= 0", v);
      minTokens = v;
      return this;
    }

    /** In [0, 1]; 0 is off. Drops tokens less probable than min_p x the most probable one. */
    public Builder minP(double v) {
      if (!(v >= 0 && v <= 1)) throw bad("min_p must be in [0, 1]", v);  // NaN fails too
      minP = v;
      return this;
    }

    /** True: a matched stop string stays at the end of the text (default false). */
    public Builder includeStopStrInOutput(boolean v) {
      includeStopStrInOutput = v;
      return this;
    }

    /** False: control pieces appear in the text as their piece text (default true). */
    public Builder skipSpecialTokens(boolean v) {
      skipSpecialTokens = v;
      return this;
    }

    /** The output constraint ({@link ResponseFormat}); null or text(): none. */
    public Builder responseFormat(ResponseFormat f) {
      responseFormat = f == null || f.type() == ResponseFormat.Type.TEXT ? null : f;
      return this;
    }

    /** Replaces the functions the model may call (chat requests only). */
    public Builder tools(List<Tool> list) {
      Set<String> names = new HashSet<>();
      for (Tool t : list) {
        if (!names.add(Objects.requireNonNull(t, "tools element").name())) {
          throw new IllegalArgumentException("tools: the function name \"" + t.name()
              + "\" is given twice");
        }
      }
      tools.clear();
      tools.addAll(list);
      return this;
    }

    /** Whether and which tool the model must call; null: the server's default. */
    public Builder toolChoice(ToolChoice choice) {
      toolChoice = choice;
      return this;
    }

    /** False: at most one call per answer; null: the server's default (true). */
    public Builder parallelToolCalls(Boolean v) {
      parallelToolCalls = v;
      return this;
    }

    public GenerationParams build() {
      if (topLogprobs > 0 && !logprobs) {
        throw bad("top_logprobs needs logprobs(true)", "top_logprobs " + topLogprobs);
      }
      if (responseFormat != null && ignoreEos) {
        throw new IllegalArgumentException("response_format cannot be combined with ignore_eos "
            + "(the constraint decides where the output ends)");
      }
      checkTools();
      return new GenerationParams(this);
    }

    private void checkTools() {
      boolean none = toolChoice == ToolChoice.NONE;
      if (toolChoice != null && !none && tools.isEmpty()) {
        throw new IllegalArgumentException("tool_choice " + toolChoice + " needs tools");
      }
      String named = toolChoice == null ? null : toolChoice.functionName();
      if (named != null && tools.stream().noneMatch(t -> t.name().equals(named))) {
        throw new IllegalArgumentException("tool_choice names the function \"" + named
            + "\", which is not among the tools");
      }
      if (!tools.isEmpty() && !none && responseFormat != null) {
        throw new IllegalArgumentException("tools and response_format both constrain the "
            + "output: give at most one (or tool_choice NONE)");
      }
    }

    private static IllegalArgumentException bad(String rule, Object got) {
      return new IllegalArgumentException(rule + " (got " + got + ")");
    }
  }
}
