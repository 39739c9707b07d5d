"""Shared helpers for the third-party client compatibility tests.

- `Service`: starts `switchyard serve --listen 127.0.0.1:0` (development mode),
  mints client tokens with `switchyard token --json`, calls the REST API with
  HS256 JWTs signed by the development key, and stops the process.
- `WireRecorder`: a transparent TCP proxy in front of the service that keeps the
  head (request line + headers) of every HTTP request the client sends, so a test
  can assert what the client really did on the wire (negotiate version, `id=`,
  transport).
- `RedirectAppServer`: a stand-in for an app server whose `/negotiate` answers
  with an Azure-style redirect `{"url": ..., "accessToken": ...}`.

Everything here uses bounded waits.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEV_KEY = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH"
API_VERSION = "api-version=2022-06-01"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BIN = os.path.normpath(os.path.join(HERE, "..", "..", "..", "target", "debug", "switchyard"))


def binary() -> str:
    return os.environ.get("TEST_SWITCHYARD_BIN", DEFAULT_BIN)


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign_jwt(claims: dict, key: str = DEV_KEY, lifetime: int = 3600) -> str:
    now = int(time.time())
    payload = {"nbf": now, "iat": now, "exp": now + lifetime, **claims}
    header = {"alg": "HS256", "typ": "JWT"}
    signing_input = (
        b64url(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + b64url(json.dumps(payload, separators=(",", ":")).encode())
    )
    sig = hmac.new(key.encode("utf-8"), signing_input.encode("ascii"), hashlib.sha256).digest()
    return signing_input + "." + b64url(sig)


def http_request(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
                 timeout: float = 10.0) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")


class Service:
    """One `switchyard serve` process on an ephemeral loopback port."""

    def __init__(self, start_timeout: float = 20.0):
        exe = binary()
        if not os.path.exists(exe):
            raise RuntimeError(f"service binary not found: {exe} (run `cargo build -p switchyard`)")
        self.exe = exe
        self._stderr = tempfile.NamedTemporaryFile(prefix="switchyard-", suffix=".log", delete=False)
        self._log_kept: str | None = None
        # The service rejects unknown SWITCHYARD_* variables, and any
        # setting would change what is tested: pass none but the log level.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
        env["SWITCHYARD_LOG"] = os.environ.get("SWITCHYARD_LOG") or "warn"
        self.proc = subprocess.Popen(
            [exe, "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, env=env,
        )
        self.stdout_lines: list[str] = []
        self._port_ready = threading.Event()
        self.port: int | None = None
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self._port_ready.wait(start_timeout) or self.port is None:
            self.stop()
            raise RuntimeError(f"service did not print its port within {start_timeout}s: "
                               f"{self.stdout_lines}\n{self.log()}")
        self.base = f"http://127.0.0.1:{self.port}"

    def _read_stdout(self):
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stdout_lines.append(line)
            m = re.search(r"Listening on 127\.0\.0\.1:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._port_ready.set()
        self._port_ready.set()

    # --- tokens and REST ---------------------------------------------------

    def client_token(self, hub: str, user: str, public_endpoint: str | None = None) -> dict:
        out = subprocess.run(
            [self.exe, "token", "--hub", hub, "--user", user, "--json",
             "--public-endpoint", public_endpoint or self.base],
            capture_output=True, timeout=30, check=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")},
        )
        return json.loads(out.stdout)

    def rest(self, method: str, path: str, body=None, query: str = API_VERSION) -> tuple[int, str]:
        url = f"{self.base}{path}" + (f"?{query}" if query else "")
        token = sign_jwt({"aud": url})  # aud = the full request URL
        headers = {"Authorization": f"Bearer {token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return http_request(method, url, data, headers)

    def broadcast(self, hub: str, target: str, args: list) -> None:
        status, text = self.rest("POST", f"/api/hubs/{urllib.parse.quote(hub)}/:send",
                                 {"target": target, "arguments": args})
        assert status == 202, f"broadcast -> {status}: {text}"

    def send_to_user(self, hub: str, user: str, target: str, args: list) -> None:
        status, text = self.rest(
            "POST", f"/api/hubs/{urllib.parse.quote(hub)}/users/{urllib.parse.quote(user)}/:send",
            {"target": target, "arguments": args})
        assert status == 202, f"send to user -> {status}: {text}"

    def user_exists(self, hub: str, user: str) -> bool:
        status, text = self.rest("GET", f"/api/hubs/{urllib.parse.quote(hub)}/users/{urllib.parse.quote(user)}")
        assert status in (200, 404), f"user exists -> {status}: {text}"
        return status == 200

    def health(self) -> int:
        return http_request("GET", f"{self.base}/api/health", timeout=5)[0]

    def assert_healthy(self) -> None:
        assert self.proc.poll() is None, f"service exited with {self.proc.returncode}\n{self.log()}"
        assert self.health() == 200

    # --- lifecycle ---------------------------------------------------------

    def log(self) -> str:
        if self._log_kept is not None:
            return self._log_kept
        try:
            with open(self._stderr.name, "r", encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._stderr.close()
        # The log stays readable (failure messages quote it) but leaves no file behind.
        if self._log_kept is None:
            self._log_kept = self.log()
            try:
                os.unlink(self._stderr.name)
            except OSError:
                pass
        return self.proc.returncode


# ---------------------------------------------------------------------------
# Wire recorder (transparent TCP proxy)
# ---------------------------------------------------------------------------

_REQUEST_HEAD = re.compile(rb"(GET|POST|DELETE|PUT|OPTIONS|HEAD) (/\S*) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.S)


_STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) ")


class Request:
    def __init__(self, method: str, target: str, headers: dict):
        self.method = method
        self.target = target
        self.headers = headers
        self.status: int | None = None
        parsed = urllib.parse.urlsplit(target)
        self.path = parsed.path
        self.query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def is_websocket(self) -> bool:
        return (self.header("upgrade") or "").lower() == "websocket"

    @property
    def is_sse(self) -> bool:
        return "text/event-stream" in (self.header("accept") or "")

    def __repr__(self):
        return f"{self.method} {self.target} -> {self.status}"


class WireRecorder:
    """Listens on an ephemeral port and forwards every TCP connection to `upstream_port`,
    recording the HTTP request heads sent by the client (WebSocket frames from clients are
    masked and hub payloads carry no HTTP request line, so they are never mistaken for one)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._streams: list[bytearray] = []
        self._answers: list[bytearray] = []
        self.events: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self.sock.accept()
            except OSError as err:
                if not self._closed:
                    self.events.append(f"accept failed: {err!r}")
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError as err:
                self.events.append(f"upstream connect failed: {err!r}")
                client.close()
                continue
            sent, answered = bytearray(), bytearray()
            with self._lock:
                self._streams.append(sent)
                self._answers.append(answered)
            threading.Thread(target=self._pump, args=(client, upstream, sent, answered, self.events),
                             daemon=True).start()

    @staticmethod
    def _pump(client: socket.socket, upstream: socket.socket, sent: bytearray, answered: bytearray,
              events: list):
        peers = {client: upstream, upstream: client}
        open_reads = {client, upstream}
        try:
            while open_reads:
                readable, _, _ = select.select(list(open_reads), [], [], 1.0)
                for s in readable:
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        open_reads.discard(s)
                        try:
                            peers[s].shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        continue
                    record = sent if s is client else answered
                    if len(record) < 1 << 20:
                        record.extend(data)
                    peers[s].sendall(data)
        except OSError as err:
            events.append(f"pump {client.fileno()}<->{upstream.fileno()}: {err!r}")
        finally:
            client.close()
            upstream.close()

    def requests(self) -> list[Request]:
        """Every request head the client sent, in connection order; `.status` is the status
        code of the matching response (None if none came)."""
        out = []
        with self._lock:
            pairs = [(bytes(a), bytes(b)) for a, b in zip(self._streams, self._answers)]
        for sent, answered in pairs:
            statuses = [int(m.group(1)) for m in _STATUS_LINE.finditer(answered)]
            for i, m in enumerate(_REQUEST_HEAD.finditer(sent)):
                headers = {}
                for line in m.group(3).split(b"\r\n"):
                    if b":" in line:
                        k, v = line.split(b":", 1)
                        headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
                req = Request(m.group(1).decode(), m.group(2).decode("latin-1"), headers)
                req.status = statuses[i] if i < len(statuses) else None
                out.append(req)
        return out

    def sent_streams(self) -> list[bytes]:
        """The raw bytes the client sent, one entry per TCP connection."""
        with self._lock:
            return [bytes(b) for b in self._streams]

    def negotiate_responses(self) -> list[dict]:
        """Every negotiate response body seen (JSON objects starting with negotiateVersion)."""
        out = []
        with self._lock:
            streams = [bytes(b) for b in self._answers]
        decoder = json.JSONDecoder()
        for stream in streams:
            text = stream.decode("utf-8", "replace")
            for m in re.finditer(r'\{"negotiateVersion"', text):
                try:
                    out.append(decoder.raw_decode(text, m.start())[0])
                except ValueError:
                    pass
        return out

    def close(self):
        # shutdown() wakes the blocked accept(); a bare close() would not, and that thread
        # could later resume accept() on a reused descriptor number and steal connections.
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._acceptor.join(5)
        self.sock.close()


# ---------------------------------------------------------------------------
# Azure-style app server stub (redirect negotiate)
# ---------------------------------------------------------------------------

class RedirectAppServer:
    """`POST {anything}/negotiate` answers `{"url": url, "accessToken": token}`: the response an
    app server using the Azure SignalR Management SDK gives. Records the negotiate paths it saw."""

    def __init__(self, url: str, access_token: str):
        seen: list[str] = []
        body = json.dumps({"url": url, "accessToken": access_token}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                seen.append(self.path)
                if urllib.parse.urlsplit(self.path).path.rstrip("/").endswith("/negotiate"):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, *args):
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
