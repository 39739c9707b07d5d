package compat

// Test harness: starts `switchyard serve`, mints tokens, calls the REST API, and records
// what a client sends on the wire through a transparent TCP proxy.

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const devKey = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH"

func binaryPath(t *testing.T) string {
	if p := os.Getenv("TEST_SWITCHYARD_BIN"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "target", "debug", "switchyard"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serviceEnv is the environment without any SWITCHYARD_ settings (development mode).
func serviceEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SWITCHYARD_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

type service struct {
	t    *testing.T
	exe  string
	cmd  *exec.Cmd
	port int
	base string
	log  *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startService runs a fresh service on an ephemeral port; it is stopped when the test ends,
// after checking that it is still running and has not panicked.
func startService(t *testing.T) *service {
	t.Helper()
	exe := binaryPath(t)
	if _, err := os.Stat(exe); err != nil {
		t.Fatalf("service binary not found: %s (run `cargo build -p switchyard`)", exe)
	}
	s := &service{t: t, exe: exe, log: &lockedBuffer{}}
	s.cmd = exec.Command(exe, "serve", "--listen", "127.0.0.1:0")
	logLevel := os.Getenv("SWITCHYARD_LOG")
	if logLevel == "" {
		logLevel = "warn"
	}
	s.cmd.Env = append(serviceEnv(), "SWITCHYARD_LOG="+logLevel)
	s.cmd.Stderr = s.log
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	portCh := make(chan int, 1)
	go func() {
		re := regexp.MustCompile(`Listening on 127\.0\.0\.1:(\d+)`)
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				p, _ := strconv.Atoi(m[1])
				portCh <- p
				sent = true
			}
		}
	}()
	exited := make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(exited)
	}()
	select {
	case s.port = <-portCh:
	case <-exited:
		t.Fatalf("service exited before printing its port; log:\n%s", s.log.String())
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Fatalf("service did not print its port; log:\n%s", s.log.String())
	}
	s.base = fmt.Sprintf("http://127.0.0.1:%d", s.port)
	t.Cleanup(func() {
		select {
		case <-exited:
			t.Errorf("service exited during the test; log:\n%s", s.log.String())
			return
		default:
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-exited
		}
		if strings.Contains(s.log.String(), "panicked") {
			t.Errorf("service panicked:\n%s", s.log.String())
		}
		if t.Failed() {
			t.Logf("service log:\n%s", s.log.String())
		}
	})
	return s
}

type clientToken struct {
	URL         string `json:"url"`
	AccessToken string `json:"accessToken"`
}

func (s *service) clientToken(hub, user, publicEndpoint string) clientToken {
	s.t.Helper()
	cmd := exec.Command(s.exe, "token", "--hub", hub, "--user", user, "--json", "--public-endpoint", publicEndpoint)
	cmd.Env = serviceEnv()
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("switchyard token: %v", err)
	}
	var tok clientToken
	if err := json.Unmarshal(out, &tok); err != nil {
		s.t.Fatalf("token output %q: %v", out, err)
	}
	return tok
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// signJWT signs an HS256 token with the development key.
func signJWT(aud string) string {
	now := time.Now().Unix()
	header := b64url([]byte(`{"alg":"HS256","typ":"JWT"}`))
	payload, _ := json.Marshal(map[string]any{"aud": aud, "nbf": now, "iat": now, "exp": now + 3600})
	input := header + "." + b64url(payload)
	mac := hmac.New(sha256.New, []byte(devKey))
	mac.Write([]byte(input))
	return input + "." + b64url(mac.Sum(nil))
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// rest calls the data-plane API; the token's aud is the full request URL.
func (s *service) rest(method, path string, body any) (int, string) {
	s.t.Helper()
	u := s.base + path + "?api-version=2022-06-01"
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+signJWT(u))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(text)
}

func (s *service) send(path string, target string, args ...any) {
	s.t.Helper()
	status, text := s.rest("POST", path, map[string]any{"target": target, "arguments": args})
	if status != 202 {
		s.t.Fatalf("POST %s -> %d: %s", path, status, text)
	}
}

func (s *service) userExists(hub, user string) bool {
	s.t.Helper()
	status, text := s.rest("GET", "/api/hubs/"+url.PathEscape(hub)+"/users/"+url.PathEscape(user), nil)
	if status != 200 && status != 404 {
		s.t.Fatalf("user exists -> %d: %s", status, text)
	}
	return status == 200
}

func (s *service) assertHealthy() {
	s.t.Helper()
	resp, err := httpClient.Get(s.base + "/api/health")
	if err != nil {
		s.t.Fatalf("health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		s.t.Fatalf("health -> %d", resp.StatusCode)
	}
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// --- wire recorder -----------------------------------------------------------

type recorder struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	streams  []*[2]bytes.Buffer // [0] client->service, [1] service->client
	wg       sync.WaitGroup
	base     string
}

func newRecorder(t *testing.T, upstreamPort int) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, upstream: fmt.Sprintf("127.0.0.1:%d", upstreamPort)}
	r.base = "http://" + ln.Addr().String()
	go r.accept()
	t.Cleanup(func() { _ = ln.Close() })
	return r
}

type tee struct {
	r   *recorder
	buf *bytes.Buffer
}

func (w tee) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	if w.buf.Len() < 1<<20 {
		w.buf.Write(p)
	}
	w.r.mu.Unlock()
	return len(p), nil
}

func (r *recorder) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", r.upstream, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		pair := &[2]bytes.Buffer{}
		r.mu.Lock()
		r.streams = append(r.streams, pair)
		r.mu.Unlock()
		pipe := func(dst, src net.Conn, rec *bytes.Buffer) {
			_, _ = io.Copy(io.MultiWriter(dst, tee{r, rec}), src)
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}
		go func() {
			done := make(chan struct{}, 2)
			go func() { pipe(u, c, &pair[0]); done <- struct{}{} }()
			go func() { pipe(c, u, &pair[1]); done <- struct{}{} }()
			<-done
			<-done
			c.Close()
			u.Close()
		}()
	}
}

type wireRequest struct {
	Method  string
	Target  string
	Path    string
	Query   url.Values
	Headers http.Header
	Status  int
}

func (w wireRequest) String() string { return fmt.Sprintf("%s %s -> %d", w.Method, w.Target, w.Status) }

func (w wireRequest) isWebSocket() bool {
	return strings.EqualFold(w.Headers.Get("Upgrade"), "websocket")
}

func (w wireRequest) isSSE() bool {
	return strings.Contains(w.Headers.Get("Accept"), "text/event-stream")
}

var (
	requestHead = regexp.MustCompile(`(?s)(GET|POST|DELETE|PUT|OPTIONS|HEAD) (/\S*) HTTP/1\.1\r\n(.*?)\r\n\r\n`)
	statusLine  = regexp.MustCompile(`HTTP/1\.1 (\d{3}) `)
)

func (r *recorder) requests() []wireRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []wireRequest
	for _, pair := range r.streams {
		sent, answered := pair[0].Bytes(), pair[1].Bytes()
		statuses := statusLine.FindAllSubmatch(answered, -1)
		for i, m := range requestHead.FindAllSubmatch(sent, -1) {
			req := wireRequest{Method: string(m[1]), Target: string(m[2]), Headers: http.Header{}}
			if u, err := url.Parse(req.Target); err == nil {
				req.Path = u.Path
				req.Query = u.Query()
			}
			for _, line := range strings.Split(string(m[3]), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					req.Headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
				}
			}
			if i < len(statuses) {
				req.Status, _ = strconv.Atoi(string(statuses[i][1]))
			}
			out = append(out, req)
		}
	}
	return out
}

// negotiateResponses returns every negotiate response body the service sent.
func (r *recorder) negotiateResponses() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, pair := range r.streams {
		text := pair[1].String()
		for _, idx := range regexp.MustCompile(`\{"negotiateVersion"`).FindAllStringIndex(text, -1) {
			dec := json.NewDecoder(strings.NewReader(text[idx[0]:]))
			var m map[string]any
			if dec.Decode(&m) == nil {
				out = append(out, m)
			}
		}
	}
	return out
}
