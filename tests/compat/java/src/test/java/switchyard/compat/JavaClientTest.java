package switchyard.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.microsoft.signalr.HubConnection;
import com.microsoft.signalr.HubConnectionBuilder;
import com.microsoft.signalr.HubConnectionState;
import com.microsoft.signalr.TransportEnum;
import io.reactivex.rxjava3.core.Single;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The Java SignalR client (com.microsoft.signalr) against a real switchyard process.
 * It negotiates with negotiateVersion=1 and uses the connectionToken as id=; its transports
 * are WebSockets and long polling; after an Azure-style redirect it negotiates again at the
 * service with the redirect's access token.
 */
class JavaClientTest {
    static final String HUB = "compat";
    static final String USER = "dave";
    static final List<Object> BROADCAST = List.of("hello", 42);
    static final List<Object> TO_USER = List.of("hello user", 43);

    /** Connects, receives a broadcast and a user send, stops; returns the connectionId. */
    static String exchange(Harness.Service svc, HubConnection conn) throws Exception {
        List<List<Object>> received = new CopyOnWriteArrayList<>();
        CompletableFuture<Exception> closed = new CompletableFuture<>();
        conn.on("newMessage", (String text, Integer number) -> received.add(List.of(text, number)),
                String.class, Integer.class);
        conn.onClosed(error -> closed.complete(error));
        assertTrue(conn.start().blockingAwait(Harness.TIMEOUT.getSeconds(), TimeUnit.SECONDS), "start timed out");
        assertEquals(HubConnectionState.CONNECTED, conn.getConnectionState());
        String connectionId = conn.getConnectionId();
        try {
            Harness.waitUntil("user connection registered", () -> svc.userExists(HUB, USER));
            svc.send("/api/hubs/" + HUB + "/:send", "{\"target\":\"newMessage\",\"arguments\":[\"hello\",42]}");
            Harness.waitUntil("broadcast, got " + received, () -> received.contains(BROADCAST));
            svc.send("/api/hubs/" + HUB + "/users/" + USER + "/:send",
                    "{\"target\":\"newMessage\",\"arguments\":[\"hello user\",43]}");
            Harness.waitUntil("user send, got " + received, () -> received.contains(TO_USER));
            assertEquals(List.of(BROADCAST, TO_USER), received);
        } finally {
            assertTrue(conn.stop().blockingAwait(Harness.TIMEOUT.getSeconds(), TimeUnit.SECONDS), "stop timed out");
        }
        Exception closeError = closed.get(Harness.TIMEOUT.getSeconds(), TimeUnit.SECONDS);
        assertNull(closeError, "onClosed reported an error on a normal stop: " + closeError);
        assertEquals(HubConnectionState.DISCONNECTED, conn.getConnectionState());
        Harness.waitUntil("connection gone after stop", () -> !svc.userExists(HUB, USER));
        svc.assertHealthy();
        return connectionId;
    }

    static HubConnection build(String url, String token, TransportEnum transport) {
        return HubConnectionBuilder.create(url)
                .withAccessTokenProvider(Single.defer(() -> Single.just(token)))
                .withTransport(transport)
                .build();
    }

    /** Negotiate v1, transport requests use the connectionToken; returns the transport requests. */
    static List<Harness.WireRequest> checkV1(Harness.Recorder wire, String connectionId, String token) {
        List<Harness.WireRequest> reqs = wire.requests();
        Harness.WireRequest neg = reqs.get(0);
        assertEquals("POST", neg.method, reqs.toString());
        assertEquals("/client/negotiate", neg.path, reqs.toString());
        assertEquals(HUB, neg.query.get("hub"));
        assertEquals("1", neg.query.get("negotiateVersion"), neg.toString());
        assertEquals("Bearer " + token, neg.headers.get("authorization"));
        List<String> responses = wire.negotiateResponses();
        assertEquals(1, responses.size(), responses.toString());
        String resp = responses.get(0);
        assertEquals(1, Harness.jsonInt(resp, "negotiateVersion"), resp);
        assertEquals(connectionId, Harness.jsonString(resp, "connectionId"), resp);
        String connectionToken = Harness.jsonString(resp, "connectionToken");
        assertNotNull(connectionToken, resp);
        List<Harness.WireRequest> rest = reqs.subList(1, reqs.size());
        for (Harness.WireRequest r : rest) {
            assertEquals("/client/", r.path, r.toString());
            assertEquals(connectionToken, r.query.get("id"), r + " should carry the connectionToken");
            assertEquals("Bearer " + token, r.headers.get("authorization"), r.toString());
        }
        return rest;
    }

    @Test
    void webSockets() throws Exception {
        try (Harness.Service svc = new Harness.Service(); Harness.Recorder wire = new Harness.Recorder(svc.port)) {
            String[] tok = svc.clientToken(HUB, USER, wire.base);
            String connectionId = exchange(svc, build(tok[0], tok[1], TransportEnum.WEBSOCKETS));
            List<Harness.WireRequest> rest = checkV1(wire, connectionId, tok[1]);
            assertEquals(1, rest.size(), rest.toString());
            assertTrue(rest.get(0).isWebSocket() && rest.get(0).status == 101, rest.toString());
        }
    }

    @Test
    void longPolling() throws Exception {
        try (Harness.Service svc = new Harness.Service(); Harness.Recorder wire = new Harness.Recorder(svc.port)) {
            String[] tok = svc.clientToken(HUB, USER, wire.base);
            String connectionId = exchange(svc, build(tok[0], tok[1], TransportEnum.LONG_POLLING));
            List<Harness.WireRequest> rest = checkV1(wire, connectionId, tok[1]);
            List<String> kinds = rest.stream().map(r -> r.method).toList();
            assertTrue(kinds.stream().filter("GET"::equals).count() >= 2, rest.toString());
            assertTrue(kinds.contains("POST"), rest.toString());
            assertTrue(kinds.contains("DELETE"), rest.toString());
            Harness.WireRequest firstPoll = rest.stream().filter(r -> r.method.equals("GET")).findFirst().get();
            assertEquals(200, firstPoll.status, rest.toString());
            Harness.WireRequest handshake = rest.stream().filter(r -> r.method.equals("POST")).findFirst().get();
            assertEquals(200, handshake.status, rest.toString());
            for (Harness.WireRequest r : rest) {
                assertTrue(!r.isWebSocket() && !r.headers.getOrDefault("accept", "").contains("event-stream"), r.toString());
                // On stop the client POSTs a Close message and then sends DELETE, on separate
                // connections: whichever the service handles second finds the connection gone (404),
                // as with ASP.NET Core; the client ignores both answers.
                if (r.method.equals("DELETE")) {
                    assertTrue(r.status == 202 || r.status == 404, r.toString());
                }
                if (r.method.equals("POST") && r != handshake) {
                    assertTrue(r.status == 200 || r.status == 404, r.toString());
                }
            }
        }
    }

    @Test
    void redirectFromAppServer() throws Exception {
        try (Harness.Service svc = new Harness.Service(); Harness.Recorder wire = new Harness.Recorder(svc.port)) {
            String[] tok = svc.clientToken(HUB, USER, wire.base);
            try (Harness.RedirectAppServer app = new Harness.RedirectAppServer(tok[0], tok[1])) {
                // The app server's own token is what the app would hand out; the redirect's token replaces it.
                String connectionId = exchange(svc, build(app.base + "/" + HUB, "app-server-token",
                        TransportEnum.WEBSOCKETS));
                assertEquals(List.of("POST /" + HUB + "/negotiate?negotiateVersion=1"), app.seen);
                List<Harness.WireRequest> rest = checkV1(wire, connectionId, tok[1]);
                assertEquals(1, rest.size(), rest.toString());
                assertTrue(rest.get(0).isWebSocket() && rest.get(0).status == 101, rest.toString());
            }
        }
    }
}
