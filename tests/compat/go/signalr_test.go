package compat

// github.com/philippseith/signalr (Go client) against a real switchyard process.
//
// By default the Go client negotiates without `negotiateVersion` (version 0) and uses the
// connectionId as `id=`; WithNegotiateVersion(1) switches WebSockets to the connectionToken.
// Its transports are WebSockets and Server-Sent Events. It sends the headers from
// WithHTTPHeaders on negotiate, the WebSocket upgrade and the SSE GET, but its SSE POSTs
// (hub messages from client to service) carry no headers at all.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/philippseith/signalr"
)

const (
	hub  = "compat"
	user = "carol"
)

var timeout = 15 * time.Second

// receiver is the client-side hub: the Go client binds the target "newMessage" to the
// method NewMessage (names compared case-insensitively).
type receiver struct {
	signalr.Receiver
	mu   sync.Mutex
	got  [][]any
	seen chan struct{}
}

func newReceiver() *receiver { return &receiver{seen: make(chan struct{}, 16)} }

func (r *receiver) NewMessage(text string, number int) {
	r.mu.Lock()
	r.got = append(r.got, []any{text, number})
	r.mu.Unlock()
	r.seen <- struct{}{}
}

func (r *receiver) snapshot() [][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]any(nil), r.got...)
}

func (r *receiver) has(args []any) bool {
	for _, g := range r.snapshot() {
		if reflect.DeepEqual(g, args) {
			return true
		}
	}
	return false
}

// testLogger keeps the client's log lines, printed only when the test fails.
type testLogger struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *testLogger) Log(keyVals ...interface{}) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(&l.buf, keyVals...)
	return nil
}

type scenario struct {
	transport        signalr.TransportType
	format           signalr.TransferFormatType
	negotiateVersion int // -1: client default (none sent)
}

// exchange connects the Go client, receives a broadcast and a user send, stops the client
// and checks the service dropped the connection. Returns the recorded wire requests.
func exchange(t *testing.T, sc scenario) (*recorder, clientToken) {
	return exchangeWith(t, sc, nil)
}

// exchangeWith is exchange with a hook called with the recorder's host and the client
// token before the client connects.
func exchangeWith(t *testing.T, sc scenario, before func(host, token string)) (*recorder, clientToken) {
	svc := startService(t)
	wire := newRecorder(t, svc.port)
	tok := svc.clientToken(hub, user, wire.base)
	if before != nil {
		before(strings.TrimPrefix(wire.base, "http://"), tok.AccessToken)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// NewHTTPConnection skips nil options (the option type is unexported, so no slice).
	negotiateVersion := signalr.WithNegotiateVersion(sc.negotiateVersion)
	if sc.negotiateVersion < 0 {
		negotiateVersion = nil
	}
	conn, err := signalr.NewHTTPConnection(ctx, tok.URL,
		signalr.WithHTTPHeaders(func() http.Header {
			h := http.Header{}
			h.Set("Authorization", "Bearer "+tok.AccessToken)
			return h
		}),
		signalr.WithTransports(sc.transport),
		negotiateVersion,
	)
	if err != nil {
		t.Fatalf("NewHTTPConnection: %v", err)
	}
	rcv := newReceiver()
	logger := &testLogger{}
	clientOpts := []func(signalr.Party) error{
		signalr.WithConnection(conn),
		signalr.WithReceiver(rcv),
		signalr.Logger(logger, true),
	}
	if sc.format != "" {
		clientOpts = append(clientOpts, signalr.TransferFormat(sc.format))
	}
	client, err := signalr.NewClient(ctx, clientOpts...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer func() {
		if t.Failed() {
			logger.mu.Lock()
			t.Logf("client log:\n%s", logger.buf.String())
			logger.mu.Unlock()
			for _, r := range wire.requests() {
				t.Logf("wire: %v", r)
			}
		}
	}()

	client.Start()
	waitCtx, waitCancel := context.WithTimeout(ctx, timeout)
	err = <-client.WaitForState(waitCtx, signalr.ClientConnected)
	waitCancel()
	if err != nil {
		t.Fatalf("client never connected: %v (client error: %v)", err, client.Err())
	}

	waitUntil(t, timeout, "user connection registered", func() bool { return svc.userExists(hub, user) })
	broadcast := []any{"hello", 42}
	toUser := []any{"hello user", 43}
	svc.send("/api/hubs/"+hub+"/:send", "newMessage", broadcast...)
	waitUntil(t, timeout, "broadcast", func() bool { return rcv.has(broadcast) })
	svc.send("/api/hubs/"+hub+"/users/"+user+"/:send", "newMessage", toUser...)
	waitUntil(t, timeout, "user send", func() bool { return rcv.has(toUser) })
	if got := rcv.snapshot(); !reflect.DeepEqual(got, [][]any{broadcast, toUser}) {
		t.Fatalf("received %v", got)
	}

	stopped := make(chan struct{})
	go func() { client.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(timeout):
		t.Fatalf("client.Stop() did not return")
	}
	if st := client.State(); st != signalr.ClientClosed {
		t.Fatalf("client state after Stop: %v", st)
	}
	waitUntil(t, timeout, "connection gone after stop", func() bool { return !svc.userExists(hub, user) })
	svc.assertHealthy()
	return wire, tok
}

func checkNegotiate(t *testing.T, wire *recorder, wantVersion int) (wireRequest, map[string]any, []wireRequest) {
	t.Helper()
	reqs := wire.requests()
	if len(reqs) < 2 {
		t.Fatalf("requests: %v", reqs)
	}
	neg := reqs[0]
	if neg.Method != "POST" || neg.Path != "/client/negotiate" || neg.Query.Get("hub") != hub || neg.Status != 200 {
		t.Fatalf("negotiate request: %v", neg)
	}
	resps := wire.negotiateResponses()
	if len(resps) != 1 {
		t.Fatalf("negotiate responses: %v", resps)
	}
	if v, _ := resps[0]["negotiateVersion"].(float64); int(v) != wantVersion {
		t.Fatalf("negotiateVersion %v, want %d", resps[0]["negotiateVersion"], wantVersion)
	}
	return neg, resps[0], reqs[1:]
}

func TestWebSocketsJSON(t *testing.T) {
	wire, tok := exchange(t, scenario{transport: signalr.TransportWebSockets, negotiateVersion: -1})
	neg, resp, rest := checkNegotiate(t, wire, 0)
	if neg.Query.Has("negotiateVersion") {
		t.Fatalf("Go client sent negotiateVersion by default: %v", neg)
	}
	if len(rest) != 1 || !rest[0].isWebSocket() || rest[0].Status != 101 {
		t.Fatalf("transport requests: %v", rest)
	}
	if id := rest[0].Query.Get("id"); id != resp["connectionId"] {
		t.Fatalf("id=%q, want connectionId %v", id, resp["connectionId"])
	}
	if h := rest[0].Headers.Get("Authorization"); h != "Bearer "+tok.AccessToken {
		t.Fatalf("WebSocket Authorization header %q", h)
	}
}

func TestWebSocketsMessagePack(t *testing.T) {
	wire, _ := exchange(t, scenario{transport: signalr.TransportWebSockets, format: "Binary", negotiateVersion: -1})
	_, resp, rest := checkNegotiate(t, wire, 0)
	if len(rest) != 1 || !rest[0].isWebSocket() || rest[0].Query.Get("id") != resp["connectionId"] {
		t.Fatalf("transport requests: %v", rest)
	}
}

func TestWebSocketsNegotiateVersion1(t *testing.T) {
	wire, _ := exchange(t, scenario{transport: signalr.TransportWebSockets, negotiateVersion: 1})
	neg, resp, rest := checkNegotiate(t, wire, 1)
	if neg.Query.Get("negotiateVersion") != "1" {
		t.Fatalf("negotiate: %v", neg)
	}
	if len(rest) != 1 || !rest[0].isWebSocket() || rest[0].Query.Get("id") != resp["connectionToken"] {
		t.Fatalf("transport requests: %v (want id = connectionToken %v)", rest, resp["connectionToken"])
	}
}

// The Go client's SSE POSTs carry no Authorization header (it builds a bare http.Client
// and request for each send), so against a service that, like Azure SignalR, wants the
// client token on every SSE/long-polling request, the handshake POST gets 401 and the
// client closes. This pins that behaviour (a client limitation; see the README).
func TestServerSentEventsPostsCarryNoToken(t *testing.T) {
	svc := startService(t)
	wire := newRecorder(t, svc.port)
	tok := svc.clientToken(hub, user, wire.base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := signalr.NewHTTPConnection(ctx, tok.URL,
		signalr.WithHTTPHeaders(func() http.Header {
			h := http.Header{}
			h.Set("Authorization", "Bearer "+tok.AccessToken)
			return h
		}),
		signalr.WithTransports(signalr.TransportServerSentEvents),
	)
	if err != nil {
		t.Fatalf("NewHTTPConnection: %v", err)
	}
	client, err := signalr.NewClient(ctx, signalr.WithConnection(conn), signalr.WithReceiver(newReceiver()),
		signalr.Logger(&testLogger{}, false))
	if err != nil {
		t.Fatal(err)
	}
	client.Start()
	waitCtx, waitCancel := context.WithTimeout(ctx, timeout)
	defer waitCancel()
	if err := <-client.WaitForState(waitCtx, signalr.ClientClosed); err != nil {
		t.Fatalf("client did not close: %v", err)
	}
	client.Stop()
	_, resp, rest := checkNegotiate(t, wire, 0)
	// The client opens the SSE GET and posts the handshake at once; when the POST's 401
	// closes it first, the GET may never reach the wire. So the POST is required and the
	// GET checked when it was sent.
	var posts int
	for _, req := range rest {
		switch req.Method {
		case "POST":
			posts++
			if req.Status != 401 || req.Headers.Get("Authorization") != "" {
				t.Fatalf("handshake POST: %v %v", req, req.Headers)
			}
		default:
			// Status 0: cancelled before the answer was on the wire.
			answered := req.Status == 200 || req.Status == 0
			if !req.isSSE() || !answered || req.Headers.Get("Authorization") == "" || req.Query.Get("id") != resp["connectionId"] {
				t.Fatalf("SSE GET: %v %v", req, req.Headers)
			}
		}
	}
	if posts != 1 || len(rest) > 2 {
		t.Fatalf("transport requests: %v", rest)
	}
	svc.assertHealthy()
}

// bearerTransport adds the client token to requests for one host that have none: here, the
// Go client's SSE POSTs, which go through http.DefaultTransport.
type bearerTransport struct {
	next  http.RoundTripper
	host  string
	token string
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == b.host && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(req)
}

// The rest of the Go client's SSE transport (its line-splitting SSE reader, handshake and
// Pings by POST), with its POSTs given the token its other requests carry.
func TestServerSentEventsJSONTokenPatched(t *testing.T) {
	original := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = original })
	patch := func(host, token string) {
		http.DefaultTransport = bearerTransport{next: original, host: host, token: token}
	}
	wire, tok := exchangeWith(t, scenario{transport: signalr.TransportServerSentEvents, negotiateVersion: -1}, patch)
	_, resp, rest := checkNegotiate(t, wire, 0)
	var gets, posts []wireRequest
	for _, r := range rest {
		if r.Query.Get("id") != resp["connectionId"] {
			t.Fatalf("request without the connectionId: %v", r)
		}
		switch r.Method {
		case "GET":
			gets = append(gets, r)
		case "POST":
			posts = append(posts, r)
		default:
			t.Fatalf("unexpected request %v", r)
		}
	}
	if len(gets) != 1 || !gets[0].isSSE() || gets[0].Headers.Get("Authorization") != "Bearer "+tok.AccessToken {
		t.Fatalf("SSE GET: %v", gets)
	}
	if len(posts) == 0 {
		t.Fatalf("no POSTs (the handshake goes by POST)")
	}
	for _, p := range posts {
		if p.Status != 200 {
			t.Fatalf("POST %v", p)
		}
	}
}
