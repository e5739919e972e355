package io.consumerdedup.testing;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A TCP proxy between a JDBC client and PostgreSQL that injects network faults for real, so a fault
 * test exercises the driver, the pool and the library exactly as a broken network would, and can
 * assert what a user would count. Mocks and {@code pg_terminate_backend} cannot do this: they
 * cannot lose a reply after the commit, nor leave a client waiting on a connection that says
 * nothing.
 *
 * <p>It listens on 127.0.0.1 on an ephemeral port, which stays the same for its whole life. Each
 * proxied connection has, per direction, one thread reading and one thread writing (so a delay does
 * not slow the reading down); all are daemon threads and end when the connection or the proxy is
 * closed. The fault is chosen by a mode, switchable at any time from any thread:
 *
 * <ul>
 *   <li>{@link #pass()}: forward bytes both ways (the default);
 *   <li>{@link #latency(Duration)}: forward, each chunk a given time after it was read;
 *   <li>{@link #refuse()}: reset every connection and refuse new ones, as a database that is down;
 *   <li>{@link #blackhole()}: keep every connection open but forward nothing, as a half-open
 *       connection after a failover.
 * </ul>
 *
 * <p>Two faults are one-shot and keep the mode: {@link #cutAll()} and {@link
 * #dropNextReplyAndCut()}. The counters ({@link #connectionsAccepted()}, {@link
 * #connectionsReset()}, {@link #repliesDropped()}) let a test check that the fault it meant to
 * inject did happen, so a test that passes because nothing broke is caught.
 */
public final class TcpProxy implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(TcpProxy.class);
  private static final String POSTGRES_PREFIX = "jdbc:postgresql://";
  private static final int POSTGRES_DEFAULT_PORT = 5432;
  private static final InetAddress LOOPBACK = InetAddress.getLoopbackAddress();
  private static final Duration REBIND_PATIENCE = Duration.ofSeconds(5);
  private static final int UPSTREAM_CONNECT_TIMEOUT_MILLIS = 5_000;
  private static final int CHUNK_SIZE = 16 * 1024;

  private enum Mode {
    PASS,
    REFUSE,
    BLACKHOLE
  }

  private final String targetHost;
  private final int targetPort;
  private final int port;
  private final Set<Link> links = ConcurrentHashMap.newKeySet();
  private final AtomicInteger accepted = new AtomicInteger();
  private final AtomicInteger reset = new AtomicInteger();
  private final AtomicInteger dropped = new AtomicInteger();
  private final AtomicInteger linkNumbers = new AtomicInteger();
  private final AtomicLong dropEpochs = new AtomicLong();

  /** The epoch of the armed {@link #dropNextReplyAndCut()}, 0 when not armed. */
  private final AtomicLong armedDrop = new AtomicLong();

  // Mode changes, the listening socket and the registration of new connections are guarded by
  // this; the pump threads only read the volatile fields.
  private volatile Mode mode = Mode.PASS;
  private volatile long latencyNanos;
  private ServerSocket listener;
  private boolean closed;

  private TcpProxy(String targetHost, int targetPort) throws IOException {
    this.targetHost = targetHost;
    this.targetPort = targetPort;
    ServerSocket first = new ServerSocket();
    first.setReuseAddress(true);
    first.bind(new InetSocketAddress(LOOPBACK, 0));
    this.port = first.getLocalPort();
    listen(first);
  }

  /** Starts a proxy to {@code targetHost:targetPort}, listening on 127.0.0.1, in pass mode. */
  public static TcpProxy start(String targetHost, int targetPort) {
    try {
      return new TcpProxy(targetHost, targetPort);
    } catch (IOException e) {
      throw new UncheckedIOException("Could not start a proxy to " + targetHost, e);
    }
  }

  /** Starts a proxy to the test PostgreSQL server, the one of {@link TestDatabase#baseUrl()}. */
  public static TcpProxy forPostgres() {
    String authority = authority(TestDatabase.baseUrl());
    int colon = authority.lastIndexOf(':');
    if (colon < 0 || colon < authority.lastIndexOf(']')) {
      return start(unbracket(authority), POSTGRES_DEFAULT_PORT);
    }
    return start(
        unbracket(authority.substring(0, colon)), Integer.parseInt(authority.substring(colon + 1)));
  }

  /** The port the proxy listens on (on 127.0.0.1); the same after {@link #refuse()}. */
  public int port() {
    return port;
  }

  /**
   * {@code jdbcUrl} with its {@code host:port} replaced by the proxy's, path and query kept, so the
   * driver connects through the proxy: {@code jdbc:postgresql://db:5432/test?user=x} becomes {@code
   * jdbc:postgresql://127.0.0.1:<port>/test?user=x}.
   */
  public String rewrite(String jdbcUrl) {
    String authority = authority(jdbcUrl);
    return POSTGRES_PREFIX
        + "127.0.0.1:"
        + port
        + jdbcUrl.substring(POSTGRES_PREFIX.length() + authority.length());
  }

  /** Forwards bytes both ways without delay (the default); ends refuse, blackhole and latency. */
  public synchronized void pass() {
    forward(Duration.ZERO);
  }

  /**
   * Forwards bytes both ways, each chunk {@code delay} after it was read, in order. A request and
   * its reply are both delayed, so a round trip takes at least twice {@code delay}. Ends refuse and
   * blackhole like {@link #pass()}.
   */
  public synchronized void latency(Duration delay) {
    if (delay.isNegative()) {
      throw new IllegalArgumentException("Negative latency " + delay);
    }
    forward(delay);
  }

  private void forward(Duration delay) {
    requireOpen();
    latencyNanos = delay.toNanos();
    if (mode == Mode.BLACKHOLE) {
      resetWhere(link -> link.blackholed);
    }
    if (mode == Mode.REFUSE) {
      listen(rebind());
    }
    mode = Mode.PASS;
  }

  /**
   * Resets every open connection (SO_LINGER 0, then close: the client sees "connection reset") and
   * refuses new ones (the listening socket is closed: the client sees "connection refused"), as a
   * database that is down. {@link #pass()} listens again on the same port.
   */
  public synchronized void refuse() {
    requireOpen();
    mode = Mode.REFUSE;
    closeListener();
    resetWhere(link -> true);
  }

  /**
   * Keeps every connection open but forwards nothing, either way, with no reset and no FIN: as a
   * half-open connection after a failover, a client's read hangs until its own socket timeout. New
   * connections are accepted (and connected to the server) but get no byte from it.
   *
   * <p>Leaving blackhole (by {@link #pass()}, {@link #latency(Duration)} or {@link #refuse()})
   * resets every connection that was open during it, counted in {@link #connectionsReset()}: bytes
   * were discarded, so resuming them would hand the driver a corrupt protocol stream, and the
   * server's session must end as it does when the old primary is gone. A client that gave up during
   * the blackhole closed its socket, but its FIN was not forwarded either: its connection is reset
   * then too.
   */
  public synchronized void blackhole() {
    requireOpen();
    if (mode == Mode.REFUSE) {
      listen(rebind());
    }
    mode = Mode.BLACKHOLE;
    for (Link link : links) {
      link.blackholed = true;
    }
  }

  /** Resets every open connection now; the mode is unchanged, so new connections work in pass. */
  public synchronized void cutAll() {
    requireOpen();
    resetWhere(link -> true);
  }

  /**
   * Arms a one-shot fault: the next reply from the server is discarded and its connection reset, as
   * when the server committed and the reply was lost. The reply is the first chunk from the server,
   * on any connection, that follows a chunk the client sent on that same connection after this
   * call: arm right before executing the statement whose reply should be lost. Connections opened
   * earlier (a pool's) are concerned like new ones; traffic the server sends unasked on other
   * connections is not taken for the reply. Arming again before the fault happened re-arms it
   * (still one fault).
   */
  public void dropNextReplyAndCut() {
    requireOpen();
    armedDrop.set(dropEpochs.incrementAndGet());
  }

  /** The connections the proxy accepted, in every mode (none while refusing). */
  public int connectionsAccepted() {
    return accepted.get();
  }

  /**
   * The connections the proxy reset as a fault (refuse, cutAll, a dropped reply, leaving
   * blackhole); not those it reset because a peer reset them, nor those cut by {@link #close()}.
   */
  public int connectionsReset() {
    return reset.get();
  }

  /** The replies discarded by {@link #dropNextReplyAndCut()}. */
  public int repliesDropped() {
    return dropped.get();
  }

  /** Stops listening and cuts every connection; their threads end. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    closeListener();
    for (Link link : List.copyOf(links)) {
      link.abort(false);
    }
  }

  private void requireOpen() {
    synchronized (this) {
      if (closed) {
        throw new IllegalStateException("The proxy on port " + port + " is closed");
      }
    }
  }

  private void resetWhere(Predicate<Link> which) {
    for (Link link : List.copyOf(links)) {
      if (which.test(link)) {
        link.abort(true);
      }
    }
  }

  /** A listening socket on the proxy's port, retried while the port is briefly still taken. */
  private ServerSocket rebind() {
    long deadline = System.nanoTime() + REBIND_PATIENCE.toNanos();
    while (true) {
      ServerSocket socket = null;
      try {
        socket = new ServerSocket();
        socket.setReuseAddress(true);
        socket.bind(new InetSocketAddress(LOOPBACK, port));
        return socket;
      } catch (BindException e) {
        closeQuietly(socket);
        if (System.nanoTime() > deadline) {
          throw new UncheckedIOException("Could not listen again on port " + port, e);
        }
        sleepQuietly(Duration.ofMillis(50));
      } catch (IOException e) {
        closeQuietly(socket);
        throw new UncheckedIOException(e);
      }
    }
  }

  private void listen(ServerSocket socket) {
    listener = socket;
    Thread acceptor = new Thread(() -> acceptLoop(socket), "tcp-proxy-" + port + "-accept");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  private void closeListener() {
    closeQuietly(listener);
    listener = null;
  }

  private void acceptLoop(ServerSocket socket) {
    while (true) {
      Socket client;
      try {
        client = socket.accept();
      } catch (IOException e) {
        return; // closed by refuse() or close()
      }
      synchronized (this) {
        // A socket the listener had taken before refuse() closed it is reset and not counted: a
        // test reading the count after refuse() must not see it grow while refusing.
        if (closed || mode == Mode.REFUSE) {
          resetQuietly(client);
          continue;
        }
        accepted.incrementAndGet();
      }
      open(client);
    }
  }

  private void open(Socket client) {
    Socket server = new Socket();
    try {
      client.setTcpNoDelay(true);
      server.setTcpNoDelay(true);
      server.connect(
          new InetSocketAddress(targetHost, targetPort), UPSTREAM_CONNECT_TIMEOUT_MILLIS);
    } catch (IOException e) {
      log.warn("The proxy on port {} could not reach {}:{}", port, targetHost, targetPort, e);
      resetQuietly(client);
      closeQuietly(server);
      return;
    }
    Link link = new Link(client, server, linkNumbers.incrementAndGet());
    synchronized (this) {
      if (closed || mode == Mode.REFUSE) {
        // refuse() or close() came between accept() and here: this connection is cut as well.
        link.abort(!closed);
        return;
      }
      link.blackholed = mode == Mode.BLACKHOLE;
      links.add(link);
    }
    link.start();
  }

  /** A proxied connection: the client's socket, the server's, and a pipe each way. */
  private final class Link {
    final Socket client;
    final Socket server;
    final Pipe toServer;
    final Pipe toClient;
    final AtomicBoolean ended = new AtomicBoolean();
    final AtomicInteger directionsDone = new AtomicInteger();
    volatile boolean blackholed;

    /** The {@link #armedDrop} epoch under which the client last sent a chunk. */
    volatile long requestEpoch;

    Link(Socket client, Socket server, int number) {
      this.client = client;
      this.server = server;
      String name = "tcp-proxy-" + port + "-" + number;
      this.toServer = new Pipe(this, client, server, false, name + "-to-server");
      this.toClient = new Pipe(this, server, client, true, name + "-to-client");
    }

    void start() {
      toServer.start();
      toClient.start();
    }

    /** Both directions ended in an orderly way: close both sockets without a reset. */
    void directionDone() {
      if (directionsDone.incrementAndGet() == 2 && ended.compareAndSet(false, true)) {
        links.remove(this);
        closeQuietly(client);
        closeQuietly(server);
      }
    }

    /** Resets both sockets; {@code counted} when the reset is a fault the proxy injects. */
    void abort(boolean counted) {
      if (!ended.compareAndSet(false, true)) {
        return;
      }
      if (counted) {
        reset.incrementAndGet();
      }
      links.remove(this);
      resetQuietly(client);
      resetQuietly(server);
      toServer.writer.interrupt();
      toClient.writer.interrupt();
    }
  }

  /** A chunk to write at {@code dueNanos}; {@code bytes} null for the end of the stream. */
  private record Chunk(long dueNanos, byte[] bytes) {}

  /** One direction of a link: a thread reading from one socket, one writing to the other. */
  private final class Pipe {
    final Link link;
    final Socket from;
    final Socket to;
    final boolean fromServer;
    final BlockingQueue<Chunk> queue = new LinkedBlockingQueue<>();
    final Thread reader;
    final Thread writer;

    Pipe(Link link, Socket from, Socket to, boolean fromServer, String name) {
      this.link = link;
      this.from = from;
      this.to = to;
      this.fromServer = fromServer;
      this.reader = new Thread(this::read, name + "-read");
      this.writer = new Thread(this::write, name + "-write");
      reader.setDaemon(true);
      writer.setDaemon(true);
    }

    void start() {
      reader.start();
      writer.start();
    }

    private void read() {
      byte[] buffer = new byte[CHUNK_SIZE];
      try {
        // Not closed when reading ends: the socket still carries the other direction.
        InputStream in = from.getInputStream();
        while (true) {
          int n = in.read(buffer);
          long readAt = System.nanoTime();
          if (n < 0) {
            // In blackhole the FIN is lost like every byte: the other side never learns.
            if (!link.blackholed) {
              queue.add(new Chunk(readAt, null));
            }
            return;
          }
          if (link.blackholed) {
            continue;
          }
          long armed = armedDrop.get();
          if (!fromServer && armed != 0) {
            link.requestEpoch = armed;
          } else if (fromServer
              && armed != 0
              && link.requestEpoch == armed
              && armedDrop.compareAndSet(armed, 0)) {
            dropped.incrementAndGet();
            link.abort(true);
            return;
          }
          queue.add(new Chunk(readAt + latencyNanos, Arrays.copyOf(buffer, n)));
        }
      } catch (IOException e) {
        // The peer reset its side, or the link was ended: pass a reset on, not counted as a fault.
        link.abort(false);
      }
    }

    private void write() {
      try {
        OutputStream out = to.getOutputStream();
        while (true) {
          Chunk chunk = queue.take();
          long wait = chunk.dueNanos() - System.nanoTime();
          if (wait > 0) {
            TimeUnit.NANOSECONDS.sleep(wait);
          }
          if (link.blackholed) {
            continue;
          }
          if (chunk.bytes() == null) {
            to.shutdownOutput();
            link.directionDone();
            return;
          }
          out.write(chunk.bytes());
          out.flush();
        }
      } catch (InterruptedException e) {
        // The link was ended.
      } catch (IOException e) {
        link.abort(false);
      }
    }
  }

  /** The {@code host:port} part of a {@code jdbc:postgresql://host:port/...} URL. */
  private static String authority(String jdbcUrl) {
    if (!jdbcUrl.startsWith(POSTGRES_PREFIX)) {
      throw new IllegalArgumentException("Not a jdbc:postgresql:// URL: " + jdbcUrl);
    }
    int start = POSTGRES_PREFIX.length();
    int end = start;
    while (end < jdbcUrl.length() && jdbcUrl.charAt(end) != '/' && jdbcUrl.charAt(end) != '?') {
      end++;
    }
    String authority = jdbcUrl.substring(start, end);
    if (authority.isEmpty() || authority.contains(",")) {
      throw new IllegalArgumentException("Not a single-host PostgreSQL URL: " + jdbcUrl);
    }
    return authority;
  }

  private static String unbracket(String host) {
    return host.startsWith("[") && host.endsWith("]") ? host.substring(1, host.length() - 1) : host;
  }

  private static void resetQuietly(Socket socket) {
    try {
      socket.setSoLinger(true, 0);
    } catch (SocketException e) {
      // Already closed: nothing to reset.
    }
    closeQuietly(socket);
  }

  private static void closeQuietly(AutoCloseable closeable) {
    if (closeable == null) {
      return;
    }
    try {
      closeable.close();
    } catch (Exception e) {
      log.debug("Closing {} failed", closeable, e);
    }
  }

  private static void sleepQuietly(Duration duration) {
    try {
      Thread.sleep(duration.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("Interrupted while waiting for port", e);
    }
  }
}
