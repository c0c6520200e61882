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

  /**
   * The open descriptors, listed until two listings 50 ms apart agree. The JVM's own threads (JIT,
   * GC, container support) open short-lived descriptors, so a single listing can catch one that is
   * closed a moment later (CI saw "fds 31 -> 32" with the extra one gone before readlink); a leak
   * is a descriptor that stays.
   */
  static java.util.List<String> stableFds() throws IOException, InterruptedException {
    java.util.List<String> last = fdTargets();
    for (int i = 0; i < 20; i++) {
      Thread.sleep(50);
      java.util.List<String> now = fdTargets();
      if (now.equals(last)) return now;
      last = now;
    }
    return last;
  }

  /** What each open descriptor points at (those closed while listing left out), sorted. */
  static java.util.List<String> fdTargets() throws IOException {
    try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
      java.util.List<String> out = new java.util.ArrayList<>();
      s.forEach(p -> {
        try {
          out.add(p.getFileName() + " -> " + Files.readSymbolicLink(p));
        } catch (IOException closedWhileListing) {
          // not open any more: not a leak
        }
      });
      java.util.Collections.sort(out);
      return out;
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
    java.util.List<String> before = stableFds();
    long fd0 = before.size();
    int th0 = threads();
    for (int i = 0; i < 1000; i++) cycle(socket, i);
    settle();
    long rss1 = rssKb();
    java.util.List<String> after = stableFds();
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
