package switchyard.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.URLDecoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/** Starts switchyard, mints tokens, calls the REST API, records the client's HTTP requests. */
final class Harness {
    static final String DEV_KEY = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH";
    static final Duration TIMEOUT = Duration.ofSeconds(15);
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private Harness() {}

    static String binary() {
        String env = System.getenv("TEST_SWITCHYARD_BIN");
        if (env != null && !env.isEmpty()) {
            return env;
        }
        return Path.of("..", "..", "..", "target", "debug", "switchyard").toAbsolutePath().normalize().toString();
    }

    static void cleanEnv(ProcessBuilder pb) {
        pb.environment().keySet().removeIf(k -> k.startsWith("SWITCHYARD_"));
    }

    static void waitUntil(String what, BooleanSupplier cond) throws InterruptedException {
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out after " + TIMEOUT.getSeconds() + "s waiting for " + what);
            }
            Thread.sleep(50);
        }
    }

    /** Minimal extraction of a top-level string field from a flat JSON object. */
    static String jsonString(String json, String field) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(field) + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(json);
        return m.find() ? m.group(1).replace("\\/", "/") : null;
    }

    static Integer jsonInt(String json, String field) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(field) + "\"\\s*:\\s*(-?\\d+)").matcher(json);
        return m.find() ? Integer.valueOf(m.group(1)) : null;
    }

    static String b64url(byte[] b) {
        return Base64.getUrlEncoder().withoutPadding().encodeToString(b);
    }

    static String signJwt(String aud) {
        long now = System.currentTimeMillis() / 1000;
        String header = b64url("{\"alg\":\"HS256\",\"typ\":\"JWT\"}".getBytes(StandardCharsets.UTF_8));
        String payload = b64url(String.format(Locale.ROOT, "{\"aud\":\"%s\",\"nbf\":%d,\"iat\":%d,\"exp\":%d}",
                aud, now, now, now + 3600).getBytes(StandardCharsets.UTF_8));
        String input = header + "." + payload;
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(DEV_KEY.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            return input + "." + b64url(mac.doFinal(input.getBytes(StandardCharsets.US_ASCII)));
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /** One `switchyard serve` process on an ephemeral loopback port. */
    static final class Service implements AutoCloseable {
        final String exe;
        final Process proc;
        final Path log;
        final int port;
        final String base;

        Service() throws Exception {
            exe = binary();
            if (!Files.exists(Path.of(exe))) {
                fail("service binary not found: " + exe + " (run `cargo build -p switchyard`)");
            }
            log = Files.createTempFile("switchyard-", ".log");
            ProcessBuilder pb = new ProcessBuilder(exe, "serve", "--listen", "127.0.0.1:0");
            cleanEnv(pb);
            String level = System.getenv("SWITCHYARD_LOG");
            pb.environment().put("SWITCHYARD_LOG", level == null || level.isEmpty() ? "warn" : level);
            pb.redirectError(log.toFile());
            pb.redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
            proc = pb.start();
            CompletableFuture<Integer> portFuture = new CompletableFuture<>();
            Thread reader = new Thread(() -> {
                Pattern p = Pattern.compile("Listening on 127\\.0\\.0\\.1:(\\d+)");
                try (var r = new java.io.BufferedReader(
                        new java.io.InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        Matcher m = p.matcher(line);
                        if (m.find()) {
                            portFuture.complete(Integer.valueOf(m.group(1)));
                        }
                    }
                } catch (IOException ignored) {
                    // process ended
                }
                portFuture.completeExceptionally(new IllegalStateException("service output ended"));
            }, "service-stdout");
            reader.setDaemon(true);
            reader.start();
            try {
                port = portFuture.get(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                proc.destroyForcibly();
                throw new IllegalStateException("service did not print its port: " + log(), e);
            }
            base = "http://127.0.0.1:" + port;
        }

        String log() {
            try {
                return Files.readString(log);
            } catch (IOException e) {
                return "";
            }
        }

        /** {"url", "accessToken"} from `switchyard token --json`. */
        String[] clientToken(String hub, String user, String publicEndpoint) throws Exception {
            ProcessBuilder pb = new ProcessBuilder(exe, "token", "--hub", hub, "--user", user, "--json",
                    "--public-endpoint", publicEndpoint);
            cleanEnv(pb);
            pb.redirectErrorStream(true);
            Process p = pb.start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), "switchyard token hung");
            assertEquals(0, p.exitValue(), out);
            return new String[] {jsonString(out, "url"), jsonString(out, "accessToken")};
        }

        /** REST call; the token's aud is the full request URL. Returns {status, body}. */
        Object[] rest(String method, String path, String body) throws Exception {
            String url = base + path + "?api-version=2022-06-01";
            HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(10))
                    .header("Authorization", "Bearer " + signJwt(url));
            if (body != null) {
                b.header("Content-Type", "application/json").method(method, HttpRequest.BodyPublishers.ofString(body));
            } else {
                b.method(method, HttpRequest.BodyPublishers.noBody());
            }
            HttpResponse<String> r = HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
            return new Object[] {r.statusCode(), r.body()};
        }

        void send(String path, String body) throws Exception {
            Object[] r = rest("POST", path, body);
            assertEquals(202, r[0], "POST " + path + ": " + r[1]);
        }

        boolean userExists(String hub, String user) {
            try {
                Object[] r = rest("GET", "/api/hubs/" + hub + "/users/" + user, null);
                int status = (Integer) r[0];
                assertTrue(status == 200 || status == 404, "user exists -> " + status + ": " + r[1]);
                return status == 200;
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }

        void assertHealthy() throws Exception {
            assertTrue(proc.isAlive(), "service exited: " + log());
            HttpResponse<Void> r = HTTP.send(HttpRequest.newBuilder(URI.create(base + "/api/health"))
                    .timeout(Duration.ofSeconds(5)).build(), HttpResponse.BodyHandlers.discarding());
            assertEquals(200, r.statusCode());
        }

        @Override
        public void close() throws Exception {
            boolean alive = proc.isAlive();
            proc.destroy(); // SIGTERM
            if (!proc.waitFor(5, TimeUnit.SECONDS)) {
                proc.destroyForcibly();
                proc.waitFor(5, TimeUnit.SECONDS);
            }
            String text = log();
            Files.deleteIfExists(log);
            assertTrue(alive, "service had exited during the test: " + text);
            assertTrue(!text.contains("panicked"), "service panicked: " + text);
        }
    }

    /** A request head the client sent, with the status of its response. */
    static final class WireRequest {
        final String method;
        final String target;
        final String path;
        final Map<String, String> query = new HashMap<>();
        final Map<String, String> headers = new HashMap<>();
        Integer status;

        WireRequest(String method, String target, String headerBlock) {
            this.method = method;
            this.target = target;
            int q = target.indexOf('?');
            path = q < 0 ? target : target.substring(0, q);
            if (q >= 0) {
                for (String kv : target.substring(q + 1).split("&")) {
                    int e = kv.indexOf('=');
                    String k = URLDecoder.decode(e < 0 ? kv : kv.substring(0, e), StandardCharsets.UTF_8);
                    String v = e < 0 ? "" : URLDecoder.decode(kv.substring(e + 1), StandardCharsets.UTF_8);
                    query.put(k, v);
                }
            }
            for (String line : headerBlock.split("\r\n")) {
                int c = line.indexOf(':');
                if (c > 0) {
                    headers.put(line.substring(0, c).trim().toLowerCase(Locale.ROOT), line.substring(c + 1).trim());
                }
            }
        }

        boolean isWebSocket() {
            return "websocket".equalsIgnoreCase(headers.getOrDefault("upgrade", ""));
        }

        @Override
        public String toString() {
            return method + " " + target + " -> " + status;
        }
    }

    /** Transparent TCP proxy that records both directions of every connection. */
    static final class Recorder implements AutoCloseable {
        private static final Pattern HEAD = Pattern.compile(
                "(GET|POST|DELETE|PUT|OPTIONS|HEAD) (/\\S*) HTTP/1\\.1\r\n(.*?)\r\n\r\n", Pattern.DOTALL);
        private static final Pattern STATUS = Pattern.compile("HTTP/1\\.1 (\\d{3}) ");
        final ServerSocket server;
        final String base;
        final int upstreamPort;
        private final List<ByteArrayOutputStream[]> streams = new ArrayList<>();

        Recorder(int upstreamPort) throws IOException {
            this.upstreamPort = upstreamPort;
            server = new ServerSocket(0, 64, java.net.InetAddress.getLoopbackAddress());
            base = "http://127.0.0.1:" + server.getLocalPort();
            Thread t = new Thread(this::acceptLoop, "recorder-accept");
            t.setDaemon(true);
            t.start();
        }

        private void acceptLoop() {
            while (!server.isClosed()) {
                try {
                    Socket client = server.accept();
                    Socket upstream = new Socket();
                    upstream.connect(new InetSocketAddress("127.0.0.1", upstreamPort), 5000);
                    ByteArrayOutputStream[] pair = {new ByteArrayOutputStream(), new ByteArrayOutputStream()};
                    synchronized (streams) {
                        streams.add(pair);
                    }
                    var done = new java.util.concurrent.atomic.AtomicInteger();
                    pump(client, upstream, pair[0], done);
                    pump(upstream, client, pair[1], done);
                } catch (IOException e) {
                    // closed
                }
            }
        }

        /** Copies one direction; on EOF half-closes the other side; the second pump to end closes both. */
        private void pump(Socket from, Socket to, ByteArrayOutputStream record,
                java.util.concurrent.atomic.AtomicInteger done) {
            Thread t = new Thread(() -> {
                byte[] buf = new byte[65536];
                try {
                    InputStream in = from.getInputStream();
                    OutputStream out = to.getOutputStream();
                    int n;
                    while ((n = in.read(buf)) > 0) {
                        synchronized (streams) {
                            if (record.size() < (1 << 20)) {
                                record.write(buf, 0, n);
                            }
                        }
                        out.write(buf, 0, n);
                        out.flush();
                    }
                } catch (IOException ignored) {
                    // connection ended
                } finally {
                    try {
                        to.shutdownOutput();
                    } catch (IOException ignored) {
                        // already closed
                    }
                    if (done.incrementAndGet() == 2) {
                        try {
                            from.close();
                            to.close();
                        } catch (IOException ignored) {
                            // ignore
                        }
                    }
                }
            }, "recorder-pump");
            t.setDaemon(true);
            t.start();
        }

        List<WireRequest> requests() {
            List<WireRequest> out = new ArrayList<>();
            synchronized (streams) {
                for (ByteArrayOutputStream[] pair : streams) {
                    String sent = pair[0].toString(StandardCharsets.ISO_8859_1);
                    String answered = pair[1].toString(StandardCharsets.ISO_8859_1);
                    List<Integer> statuses = new ArrayList<>();
                    Matcher sm = STATUS.matcher(answered);
                    while (sm.find()) {
                        statuses.add(Integer.valueOf(sm.group(1)));
                    }
                    Matcher m = HEAD.matcher(sent);
                    int i = 0;
                    while (m.find()) {
                        WireRequest r = new WireRequest(m.group(1), m.group(2), m.group(3));
                        r.status = i < statuses.size() ? statuses.get(i) : null;
                        out.add(r);
                        i++;
                    }
                }
            }
            return out;
        }

        String dump() {
            StringBuilder sb = new StringBuilder();
            synchronized (streams) {
                for (ByteArrayOutputStream[] pair : streams) {
                    sb.append(">>> ").append(pair[0].toString(StandardCharsets.ISO_8859_1).replace("\u001e", "<RS>"))
                      .append("\n<<< ").append(pair[1].toString(StandardCharsets.ISO_8859_1).replace("\u001e", "<RS>"))
                      .append("\n");
                }
            }
            return sb.toString();
        }

        /** Bodies of the negotiate responses (JSON starting with negotiateVersion). */
        List<String> negotiateResponses() {
            List<String> out = new ArrayList<>();
            synchronized (streams) {
                for (ByteArrayOutputStream[] pair : streams) {
                    String answered = pair[1].toString(StandardCharsets.UTF_8);
                    Matcher m = Pattern.compile("\\{\"negotiateVersion\"[^\\r\\n]*?\\]\\}").matcher(answered);
                    while (m.find()) {
                        out.add(m.group());
                    }
                }
            }
            return out;
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }

    /** An app server whose negotiate answers an Azure-style redirect {url, accessToken}. */
    static final class RedirectAppServer implements AutoCloseable {
        final HttpServer server;
        final String base;
        final List<String> seen = java.util.Collections.synchronizedList(new ArrayList<>());

        RedirectAppServer(String url, String accessToken) throws IOException {
            server = HttpServer.create(new InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), 0), 0);
            byte[] body = ("{\"url\":\"" + url + "\",\"accessToken\":\"" + accessToken + "\"}")
                    .getBytes(StandardCharsets.UTF_8);
            server.createContext("/", exchange -> {
                seen.add(exchange.getRequestMethod() + " " + exchange.getRequestURI());
                if ("POST".equals(exchange.getRequestMethod())
                        && exchange.getRequestURI().getPath().endsWith("/negotiate")) {
                    exchange.getResponseHeaders().set("Content-Type", "application/json");
                    exchange.sendResponseHeaders(200, body.length);
                    exchange.getResponseBody().write(body);
                } else {
                    exchange.sendResponseHeaders(404, -1);
                }
                exchange.close();
            });
            server.start();
            base = "http://127.0.0.1:" + server.getAddress().getPort();
        }

        @Override
        public void close() {
            server.stop(0);
        }
    }
}
