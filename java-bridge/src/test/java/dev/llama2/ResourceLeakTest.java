package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * 1,000 connect / generate / close cycles leave native memory, file descriptors and threads where
 * they were. The JVM runs with a fixed, pre-touched heap (CMake: -Xms = -Xmx, AlwaysPreTouch), so
 * RSS growth is native growth (the shim, the C++ client, JNA).
 */
@Timeout(240)  // about 5 s on an idle machine; minutes when the cores are saturated
class ResourceLeakTest {
  static final long RSS_TOLERANCE_KB = 6 * 1024;

  static long rssKb() throws IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
    }
    throw new IllegalStateException("no VmRSS in /proc/self/status");
  }

  static long fds() throws IOException {
    return fdTargets().size();
  }

  /** What each open descriptor points at, so that a failure names the descriptor that stayed. */
  static java.util.List<String> fdTargets() throws IOException {
    try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
      return s.map(p -> {
        try {
          return p.getFileName() + " -> " + Files.readSymbolicLink(p);
        } catch (IOException e) {
          return p.getFileName() + " -> (closed while listing)";
        }
      }).sorted().collect(java.util.stream.Collectors.toList());
    }
  }

  static int threads() {
    return ManagementFactory.getThreadMXBean().getThreadCount();
  }

  /** One cycle; odd cycles stream through the callback path (reader thread attached to the JVM). */
  static void cycle(String socket, int i) {
    GenerationParams p = GenerationParams.builder().maxNewTokens(2).temperature(0).build();
    try (Llama2Client c = Llama2Client.connect(socket)) {
      if (i % 2 == 0) {
        c.generate("leak check " + (i % 10), p);
      } else {
        try (TokenStream ts = c.tokens("leak check " + (i % 10), p)) {
          for (String ignored : ts) { }
        }
      }
    }
  }

  static void settle() throws InterruptedException {
    for (int i = 0; i < 3; i++) {
      System.gc();
      Thread.sleep(100);
    }
  }

  @Test
  void thousandCyclesDoNotLeak() throws Exception {
    String socket = TestServer.tiny().socket;
    for (int i = 0; i < 200; i++) cycle(socket, i);  // JIT, class loading, malloc arenas, JNA
    settle();
    long rss0 = rssKb();
    java.util.List<String> before = fdTargets();
    long fd0 = before.size();
    int th0 = threads();
    for (int i = 0; i < 1000; i++) cycle(socket, i);
    settle();
    long rss1 = rssKb();
    java.util.List<String> after = fdTargets();
    long fd1 = after.size();
    int th1 = threads();
    System.out.printf("RSS %d -> %d kB (%+d), fds %d -> %d, threads %d -> %d%n",
        rss0, rss1, rss1 - rss0, fd0, fd1, th0, th1);
    assertEquals(fd0, fd1, () -> "file descriptors: before " + before + ", after " + after);
    assertTrue(th1 <= th0 + 1, "threads " + th0 + " -> " + th1);
    assertTrue(rss1 - rss0 < RSS_TOLERANCE_KB, "RSS grew by " + (rss1 - rss0) + " kB");
    assertEquals(0, Calls.live(), "no generation left registered");
  }
}
