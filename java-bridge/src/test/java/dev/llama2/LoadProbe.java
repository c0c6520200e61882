package dev.llama2;

/** Run in a child JVM by ServerUnavailableTest: prints how loading the shim fails. */
public final class LoadProbe {
  private LoadProbe() {}

  public static void main(String[] args) {
    try {
      Llama2Client.connect("/nonexistent/llama2.sock").close();
      System.out.println("LOADED");
    } catch (Llama2Exception e) {
      System.out.println(e.code() + ": " + e.getMessage());
    }
  }
}
