// Command go-signalr-peer serves the switchyard-bench hub with the Go SignalR
// server library github.com/philippseith/signalr, so that switchyard-bench can
// run its scenarios against a second, independent implementation of the
// SignalR protocols ("same-protocol peer"). See README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/philippseith/signalr"
)

// measureTarget is the client method every bench message is delivered to.
const measureTarget = "Measure"

// ---------------------------------------------------------------------------
// Connection registry (replaces the library's default HubLifetimeManager)
// ---------------------------------------------------------------------------

// userKey is the context key under which the HTTP layer stores the value of
// the `user` query parameter. The library builds every connection's context
// from the HTTP request context, so the value is visible from
// HubConnection.Context() when the connection is registered.
type userKey struct{}

type connEntry struct {
	conn     signalr.HubConnection
	publicID string // the connectionId the client got from negotiate
	user     string
	groups   map[string]struct{}
}

// negotiation is one negotiate response whose connection has not started yet.
type negotiation struct {
	token, connectionID string
	at                  time.Time
}

// negotiationTTL bounds how long an unused negotiate response is remembered.
const negotiationTTL = 2 * time.Minute

// registry implements signalr.HubLifetimeManager. The library's default
// manager writes its per-group maps without any locking (concurrent JoinGroup
// calls are a data race, reported by the race detector; Go's runtime may abort
// the process on concurrent map writes) and never drops a closed connection
// from its groups, so this one keeps all indexes under a single RWMutex and
// also indexes connections by user. Delivery mirrors the
// library's default manager: one goroutine per recipient.
//
// Connection ids: over WebSockets the library uses the negotiated
// connectionId, but over Server-Sent Events it uses the connectionToken. The
// registry therefore remembers token → connectionId from each negotiate
// response and lets the negotiated connectionId (what clients know, and what
// GetConnectionId returns) address SSE connections as well.
type registry struct {
	mu       sync.RWMutex
	conns    map[string]*connEntry // by the library's connection id
	byPublic map[string]string     // negotiated connectionId → library id, where they differ
	groups   map[string]map[string]signalr.HubConnection
	users    map[string]map[string]signalr.HubConnection

	negMu   sync.Mutex
	byToken map[string]*negotiation
	byCID   map[string]*negotiation
	negFIFO []*negotiation
}

func newRegistry() *registry {
	return &registry{
		conns:    make(map[string]*connEntry),
		byPublic: make(map[string]string),
		groups:   make(map[string]map[string]signalr.HubConnection),
		users:    make(map[string]map[string]signalr.HubConnection),
		byToken:  make(map[string]*negotiation),
		byCID:    make(map[string]*negotiation),
	}
}

// Negotiated records a negotiate response (negotiateVersion 1).
func (r *registry) Negotiated(token, connectionID string) {
	if token == "" || connectionID == "" {
		return
	}
	n := &negotiation{token: token, connectionID: connectionID, at: time.Now()}
	r.negMu.Lock()
	defer r.negMu.Unlock()
	r.pruneNegotiationsLocked(n.at)
	r.byToken[token] = n
	r.byCID[connectionID] = n
	r.negFIFO = append(r.negFIFO, n)
}

func (r *registry) forgetNegotiationLocked(n *negotiation) {
	if r.byToken[n.token] == n {
		delete(r.byToken, n.token)
	}
	if r.byCID[n.connectionID] == n {
		delete(r.byCID, n.connectionID)
	}
}

func (r *registry) pruneNegotiationsLocked(now time.Time) {
	i := 0
	for ; i < len(r.negFIFO) && now.Sub(r.negFIFO[i].at) > negotiationTTL; i++ {
		r.forgetNegotiationLocked(r.negFIFO[i])
		r.negFIFO[i] = nil
	}
	r.negFIFO = r.negFIFO[i:]
}

// publicIDFor maps the library's id of a starting connection to the
// connectionId its client got from negotiate, and forgets the negotiation.
func (r *registry) publicIDFor(id string) string {
	r.negMu.Lock()
	defer r.negMu.Unlock()
	if n := r.byToken[id]; n != nil { // SSE: the library id is the token
		r.forgetNegotiationLocked(n)
		return n.connectionID
	}
	if n := r.byCID[id]; n != nil { // WebSockets: the library id is the connectionId
		r.forgetNegotiationLocked(n)
	}
	return id
}

// PublicID returns the negotiated connectionId of a connection.
func (r *registry) PublicID(id string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e := r.conns[id]; e != nil {
		return e.publicID
	}
	return id
}

// lookupLocked finds a connection by negotiated connectionId or library id.
func (r *registry) lookupLocked(id string) *connEntry {
	if e := r.conns[id]; e != nil {
		return e
	}
	if internal, ok := r.byPublic[id]; ok {
		return r.conns[internal]
	}
	return nil
}

func addToIndex(index map[string]map[string]signalr.HubConnection, key, id string, conn signalr.HubConnection) {
	members := index[key]
	if members == nil {
		members = make(map[string]signalr.HubConnection)
		index[key] = members
	}
	members[id] = conn
}

func removeFromIndex(index map[string]map[string]signalr.HubConnection, key, id string) {
	if members := index[key]; members != nil {
		delete(members, id)
		if len(members) == 0 {
			delete(index, key)
		}
	}
}

// OnConnected is called by the library before the connection's first message
// is processed (and after the handshake response was written).
func (r *registry) OnConnected(conn signalr.HubConnection) {
	id := conn.ConnectionID()
	user, _ := conn.Context().Value(userKey{}).(string)
	public := r.publicIDFor(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns[id] = &connEntry{conn: conn, publicID: public, user: user, groups: make(map[string]struct{})}
	if public != id {
		r.byPublic[public] = id
	}
	if user != "" {
		addToIndex(r.users, user, id, conn)
	}
}

func (r *registry) OnDisconnected(conn signalr.HubConnection) {
	id := conn.ConnectionID()
	r.mu.Lock()
	defer r.mu.Unlock()
	entry := r.conns[id]
	if entry == nil {
		return
	}
	delete(r.conns, id)
	if entry.publicID != id && r.byPublic[entry.publicID] == id {
		delete(r.byPublic, entry.publicID)
	}
	for group := range entry.groups {
		removeFromIndex(r.groups, group, id)
	}
	if entry.user != "" {
		removeFromIndex(r.users, entry.user, id)
	}
}

// AddToGroup adds a connected connection to a group; unknown ids are ignored.
// The change is visible to every send that starts after it returns.
func (r *registry) AddToGroup(group, connectionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entry := r.conns[connectionID]
	if entry == nil {
		return
	}
	entry.groups[group] = struct{}{}
	addToIndex(r.groups, group, connectionID, entry.conn)
}

func (r *registry) RemoveFromGroup(group, connectionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if entry := r.conns[connectionID]; entry != nil {
		delete(entry.groups, group)
	}
	removeFromIndex(r.groups, group, connectionID)
}

func deliver(recipients []signalr.HubConnection, target string, args []interface{}) {
	for _, conn := range recipients {
		go func(c signalr.HubConnection) {
			// A failed write aborts that connection inside the library; there
			// is nobody to report the error to.
			_ = c.SendInvocation("", target, args)
		}(conn)
	}
}

func snapshot(members map[string]signalr.HubConnection) []signalr.HubConnection {
	out := make([]signalr.HubConnection, 0, len(members))
	for _, conn := range members {
		out = append(out, conn)
	}
	return out
}

func (r *registry) InvokeAll(target string, args []interface{}) {
	r.mu.RLock()
	recipients := make([]signalr.HubConnection, 0, len(r.conns))
	for _, entry := range r.conns {
		recipients = append(recipients, entry.conn)
	}
	r.mu.RUnlock()
	deliver(recipients, target, args)
}

func (r *registry) InvokeClient(connectionID, target string, args []interface{}) {
	r.mu.RLock()
	entry := r.lookupLocked(connectionID)
	r.mu.RUnlock()
	if entry != nil {
		deliver([]signalr.HubConnection{entry.conn}, target, args)
	}
}

func (r *registry) InvokeGroup(group, target string, args []interface{}) {
	r.mu.RLock()
	recipients := snapshot(r.groups[group])
	r.mu.RUnlock()
	deliver(recipients, target, args)
}

func (r *registry) InvokeUser(user, target string, args []interface{}) {
	r.mu.RLock()
	recipients := snapshot(r.users[user])
	r.mu.RUnlock()
	deliver(recipients, target, args)
}

// ---------------------------------------------------------------------------
// Hub
// ---------------------------------------------------------------------------

// benchHub is created by the library for every invocation. Its exported
// methods are the hub methods; the library matches invocation targets to them
// case-insensitively. Sends go through the registry directly: with a custom
// HubLifetimeManager, the library's Clients()/Groups() helpers still point at
// its internal default manager, which never sees a connection.
type benchHub struct {
	reg *registry
	ctx signalr.HubContext
}

func (h *benchHub) Initialize(ctx signalr.HubContext) { h.ctx = ctx }
func (h *benchHub) OnConnected(string)                {}
func (h *benchHub) OnDisconnected(string)             {}

// Echo sends Measure(ts, payload) back to the caller. ts is a float64 so that
// fractional millisecond stamps survive both hub protocols unchanged.
func (h *benchHub) Echo(ts float64, payload string) {
	h.reg.InvokeClient(h.ctx.ConnectionID(), measureTarget, []interface{}{ts, payload})
}

// Broadcast sends Measure(ts, payload) to every connection, the caller included.
func (h *benchHub) Broadcast(ts float64, payload string) {
	h.reg.InvokeAll(measureTarget, []interface{}{ts, payload})
}

func (h *benchHub) SendToConnection(connectionID string, ts float64, payload string) {
	h.reg.InvokeClient(connectionID, measureTarget, []interface{}{ts, payload})
}

func (h *benchHub) SendToGroup(group string, ts float64, payload string) {
	h.reg.InvokeGroup(group, measureTarget, []interface{}{ts, payload})
}

func (h *benchHub) SendToUser(user string, ts float64, payload string) {
	h.reg.InvokeUser(user, measureTarget, []interface{}{ts, payload})
}

// JoinGroup returns (and so completes the invocation) only after the
// membership change is in place.
func (h *benchHub) JoinGroup(group string) {
	h.reg.AddToGroup(group, h.ctx.ConnectionID())
}

func (h *benchHub) LeaveGroup(group string) {
	h.reg.RemoveFromGroup(group, h.ctx.ConnectionID())
}

// GetConnectionId returns the caller's connectionId as its client got it from
// negotiate (see registry for the SSE case).
func (h *benchHub) GetConnectionId() string {
	return h.reg.PublicID(h.ctx.ConnectionID())
}

// ---------------------------------------------------------------------------
// HTTP layer
// ---------------------------------------------------------------------------

// hubHandler wraps the library's handlers. It
//   - carries the `user` query parameter into the request context, from where
//     it reaches the connection's context (see registry.OnConnected);
//   - records each negotiate response's connectionToken → connectionId pair
//     (see registry);
//   - unless compression is wanted, drops the WebSocket permessage-deflate
//     offer: the library would always accept it, ASP.NET Core does not
//     compress by default.
func hubHandler(next http.Handler, hub string, reg *registry, wsCompression bool) http.Handler {
	negotiatePath := "/" + hub + "/negotiate"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user := r.URL.Query().Get("user"); user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		if !wsCompression {
			r.Header.Del("Sec-WebSocket-Extensions")
		}
		if r.Method != http.MethodPost || r.URL.Path != negotiatePath {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: make(http.Header)}
		next.ServeHTTP(rec, r)
		var resp struct {
			ConnectionToken string `json:"connectionToken"`
			ConnectionID    string `json:"connectionId"`
		}
		if rec.status == http.StatusOK && json.Unmarshal(rec.body.Bytes(), &resp) == nil {
			reg.Negotiated(resp.ConnectionToken, resp.ConnectionID)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		if rec.status == http.StatusOK && w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// recorder buffers a (small) response, here the negotiate response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.status = code
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	return rec.body.Write(b)
}

// restAPI answers the send operations of the Azure SignalR data-plane REST
// API (without authentication):
//
//	POST /api[/v1]/hubs/{hub}/:send
//	POST /api[/v1]/hubs/{hub}/users/{user}/:send
//	POST /api[/v1]/hubs/{hub}/groups/{group}/:send
//	POST /api[/v1]/hubs/{hub}/connections/{connectionId}/:send
//
// with a body {"target": "...", "arguments": [...]}; they answer 202 with an
// empty body.
type restAPI struct {
	hub     string
	reg     *registry
	maxBody int64
}

type restPayload struct {
	Target    string            `json:"target"`
	Arguments []json.RawMessage `json:"arguments"`
}

func (a *restAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs, ok := splitPath(r.URL.EscapedPath())
	if !ok || len(segs) < 1 || segs[0] != "api" {
		http.NotFound(w, r)
		return
	}
	segs = segs[1:]
	if len(segs) > 0 && segs[0] == "v1" {
		segs = segs[1:]
	}
	if len(segs) < 3 || segs[0] != "hubs" || !strings.EqualFold(segs[1], a.hub) {
		http.NotFound(w, r)
		return
	}
	segs = segs[2:]
	var send func(target string, args []interface{})
	switch {
	case len(segs) == 1 && segs[0] == ":send":
		send = a.reg.InvokeAll
	case len(segs) == 3 && segs[2] == ":send" && segs[0] == "users":
		user := segs[1]
		send = func(t string, args []interface{}) { a.reg.InvokeUser(user, t, args) }
	case len(segs) == 3 && segs[2] == ":send" && segs[0] == "groups":
		group := segs[1]
		send = func(t string, args []interface{}) { a.reg.InvokeGroup(group, t, args) }
	case len(segs) == 3 && segs[2] == ":send" && segs[0] == "connections":
		id := segs[1]
		send = func(t string, args []interface{}) { a.reg.InvokeClient(id, t, args) }
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	target, args, err := readPayload(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	send(target, args)
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}

// splitPath splits an escaped URL path into unescaped segments.
func splitPath(escaped string) ([]string, bool) {
	parts := strings.Split(strings.Trim(escaped, "/"), "/")
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

func readPayload(body io.Reader) (string, []interface{}, error) {
	var p restPayload
	if err := json.NewDecoder(body).Decode(&p); err != nil {
		return "", nil, fmt.Errorf("invalid body: %v", err)
	}
	if p.Target == "" {
		return "", nil, errors.New("invalid body: target is required")
	}
	args := make([]interface{}, len(p.Arguments))
	for i, raw := range p.Arguments {
		v, err := decodeJSONValue(raw)
		if err != nil {
			return "", nil, fmt.Errorf("invalid argument %d: %v", i, err)
		}
		args[i] = v
	}
	return p.Target, args, nil
}

// decodeJSONValue turns a JSON value into plain Go values that both hub
// protocols encode faithfully: integers become int64 (MessagePack int),
// other numbers float64 (shortest round-trip text in JSON, float64 in
// MessagePack).
func decodeJSONValue(raw json.RawMessage) (interface{}, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v interface{}
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return normalizeNumbers(v), nil
}

func normalizeNumbers(v interface{}) interface{} {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	case []interface{}:
		for i := range t {
			t[i] = normalizeNumbers(t[i])
		}
		return t
	case map[string]interface{}:
		for k := range t {
			t[k] = normalizeNumbers(t[k])
		}
		return t
	default:
		return v
	}
}

// ---------------------------------------------------------------------------
// Logging
// ---------------------------------------------------------------------------

type nopLogger struct{}

func (nopLogger) Log(...interface{}) error { return nil }

// stderrLogger prints the library's key/value log events as one line each.
type stderrLogger struct{ mu sync.Mutex }

func (l *stderrLogger) Log(kv ...interface{}) error {
	var b strings.Builder
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i+1 < len(kv) {
			fmt.Fprintf(&b, "%v=%q", kv[i], fmt.Sprint(kv[i+1]))
		} else {
			fmt.Fprintf(&b, "%v", kv[i])
		}
	}
	b.WriteByte('\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := io.WriteString(os.Stderr, b.String())
	return err
}

// ---------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------

func appendOnce(list []signalr.TransportType, t signalr.TransportType) []signalr.TransportType {
	for _, have := range list {
		if have == t {
			return list
		}
	}
	return append(list, t)
}

func parseTransports(s string) ([]signalr.TransportType, error) {
	var out []signalr.TransportType
	for _, t := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "websockets", "ws":
			out = appendOnce(out, signalr.TransportWebSockets)
		case "serversentevents", "sse":
			out = appendOnce(out, signalr.TransportServerSentEvents)
		case "":
		default:
			return nil, fmt.Errorf("unknown transport %q (want WebSockets, ServerSentEvents)", t)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no transport given")
	}
	return out, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "go-signalr-peer:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (host:port)")
	hub := flag.String("hub", "bench", "hub name; the hub is served at /{hub}")
	verbose := flag.Bool("verbose", false, "log the library's info events to stderr")
	debug := flag.Bool("debug", false, "log the library's debug events too (every message)")
	maxMsg := flag.Uint("max-message-size", 64*1024, "maximum size in bytes of one incoming message")
	transports := flag.String("transports", "WebSockets,ServerSentEvents", "comma-separated transports to offer")
	wsCompression := flag.Bool("ws-compression", false, "accept WebSocket permessage-deflate offers")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go-signalr [flags]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", flag.Args())
	}
	if *hub == "" || strings.ContainsAny(*hub, "/?#") {
		return fmt.Errorf("invalid hub name %q", *hub)
	}
	if *maxMsg == 0 {
		return errors.New("--max-message-size must be > 0")
	}
	tt, err := parseTransports(*transports)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	serverCtx, cancelServer := context.WithCancel(context.Background())
	defer cancelServer()

	var logger signalr.StructuredLogger = nopLogger{}
	if *verbose || *debug {
		logger = &stderrLogger{}
	}
	reg := newRegistry()
	server, err := signalr.NewServer(serverCtx,
		signalr.Logger(logger, *debug),
		signalr.HubFactory(func() signalr.HubInterface { return &benchHub{reg: reg} }),
		signalr.WithHubLifetimeManager(func(signalr.Server) (signalr.HubLifetimeManager, error) { return reg, nil }),
		signalr.HTTPTransports(tt...),
		signalr.KeepAliveInterval(15*time.Second),
		signalr.TimeoutInterval(30*time.Second),
		signalr.HandshakeTimeout(15*time.Second),
		signalr.MaximumReceiveMessageSize(*maxMsg),
		signalr.InsecureSkipVerify(true), // accept any Origin, like a CORS-open bench server
	)
	if err != nil {
		return err
	}

	hubMux := http.NewServeMux()
	server.MapHTTP(signalr.WithHTTPServeMux(hubMux), "/"+*hub)
	root := http.NewServeMux()
	root.Handle("/api/", &restAPI{hub: *hub, reg: reg, maxBody: int64(*maxMsg) + 4096})
	root.Handle("/", hubHandler(hubMux, *hub, reg, *wsCompression))

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	httpServer := &http.Server{Handler: root, ReadHeaderTimeout: 30 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpServer.Serve(ln) }()
	// os.Stdout is unbuffered: the line is out once Printf returns.
	fmt.Printf("Peer listening on http://%s\n", net.JoinHostPort(host, port))

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	// Stop all hub connections (this also ends SSE streams), then the server.
	cancelServer()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		_ = httpServer.Close()
	}
	return nil
}
