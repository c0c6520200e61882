package dev.llama2;

/** Server-side timings of one generation (the {@code done} event's {@code timings}), in seconds. */
public record Timings(double queueSeconds, double timeToFirstTokenSeconds, double totalSeconds) {}
