// Starts DynamoDB Local listening on 127.0.0.1 only.
//
// DynamoDB Local's own main binds its Jetty connector to every interface
// and has no option to choose one. This launcher builds the same server from
// the same command line, points every connector at the loopback address
// before the server starts, then starts it, and prints
// "DynamoDBLocalLoopback listening on 127.0.0.1:PORT" once it listens.
//
// With RUNLEDGER_WATCH_STDIN=1 in its environment it exits when its stdin
// reaches end of file: the parent holding the other end of that pipe died.
//
// Usage: java -cp DIR DynamoDBLocalLoopback JAR [DynamoDB Local options]
//
// It is compiled against the JDK alone and reaches DynamoDB Local through a
// class loader over JAR (whose manifest lists its libraries), so compiling
// it is quick and it follows whichever DynamoDB Local is installed.
import java.io.File;
import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.net.URL;
import java.net.URLClassLoader;
import java.util.Arrays;

public class DynamoDBLocalLoopback {
  static final String HOST = "127.0.0.1";

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) {
      System.err.println("DynamoDBLocalLoopback: want the path of DynamoDBLocal.jar, then its options");
      System.exit(2);
    }
    if ("1".equals(System.getenv("RUNLEDGER_WATCH_STDIN"))) {
      watchStdin();
    }
    try {
      start(new File(argv[0]), Arrays.copyOfRange(argv, 1, argv.length));
    } catch (InvocationTargetException e) {
      // A port already taken lands here ("Failed to bind", BindException);
      // the caller reads the output and retries another port.
      e.getCause().printStackTrace();
      System.exit(1);
    }
  }

  static void start(File jar, String[] args) throws Exception {
    URLClassLoader loader =
        new URLClassLoader(new URL[] {jar.toURI().toURL()}, DynamoDBLocalLoopback.class.getClassLoader());
    Thread.currentThread().setContextClassLoader(loader);
    Class<?> runner = loader.loadClass("com.amazonaws.services.dynamodbv2.local.main.ServerRunner");
    Object proxy = runner.getMethod("createServerFromCommandLineArgs", String[].class).invoke(null, (Object) args);
    // DynamoDBProxyServer keeps its Jetty server in a private field.
    Field field = proxy.getClass().getDeclaredField("server");
    field.setAccessible(true);
    Object jetty = field.get(proxy);
    Object[] connectors = (Object[]) jetty.getClass().getMethod("getConnectors").invoke(jetty);
    if (connectors.length == 0) {
      throw new IllegalStateException("DynamoDB Local's server has no connector to bind to " + HOST);
    }
    for (Object c : connectors) {
      // Every connector must take the host, or nothing starts.
      c.getClass().getMethod("setHost", String.class).invoke(c, HOST);
    }
    proxy.getClass().getMethod("start").invoke(proxy);
    for (Object c : connectors) {
      Object port = c.getClass().getMethod("getLocalPort").invoke(c);
      System.out.println("DynamoDBLocalLoopback listening on " + HOST + ":" + port);
    }
  }

  // watchStdin ends the process once stdin reaches end of file. Nothing is
  // ever written to it; the end comes when the parent's end is closed.
  static void watchStdin() {
    Thread t =
        new Thread(
            () -> {
              try {
                while (System.in.read() >= 0) {}
              } catch (IOException e) {
                // A broken stdin means the same: the parent is gone.
              }
              System.err.println("DynamoDBLocalLoopback: stdin closed, the parent is gone: exiting");
              Runtime.getRuntime().halt(0);
            },
            "runledger-parent-watch");
    t.setDaemon(true);
    t.start();
  }
}
