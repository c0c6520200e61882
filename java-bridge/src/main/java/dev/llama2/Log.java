package dev.llama2;

/**
 * The library's one {@link System.Logger} ({@code dev.llama2}): failures that no caller can receive
 * (an exception thrown by a {@link TokenListener} or a {@link java.util.concurrent.Flow.Subscriber}
 * on a library thread, a cancel that could not be sent) go here instead of stderr. The JDK routes
 * it to java.util.logging by default, or to whatever {@code System.LoggerFinder} the application
 * installs (SLF4J and Log4j ship one).
 */
final class Log {
  private Log() {}

  static final System.Logger LOG = System.getLogger("dev.llama2");
}
