#!/usr/bin/env bash
# REST over https on HTTP/1.1 and HTTP/2 (docs/performance.md, "REST over https"). One release
# service with --tls-cert/--tls-key (a CA and leaf made with openssl), curl as the caller:
# N broadcast calls one after another on one connection, then M with 50 in flight (HTTP/1.1:
# 50 connections; HTTP/2: one, multiplexed). Prints calls per second and the answers seen.
# No client is connected, so each call is HTTP + TLS + JWT + routing, no delivery.
# Usage: bench/runs/rest-h1-h2.sh [SEQUENTIAL] [PARALLEL] [ROUNDS]   (default 5000 20000 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
sequential="${1:-5000}"
parallel="${2:-20000}"
rounds="${3:-2}"
bin="${CARGO_TARGET_DIR:-target}/release/switchyard"
[ -x "$bin" ] || cargo build --release -p switchyard
dir="$(mktemp -d -t switchyard-h2-XXXXXX)"
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 -subj "/CN=bench CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req "${ec[@]}" -keyout "$dir/key.pem" -out "$dir/leaf.csr" -subj "/CN=127.0.0.1" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$dir/leaf.ext"
openssl x509 -req -in "$dir/leaf.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
  -out "$dir/cert.pem" -days 2 -extfile "$dir/leaf.ext" 2>/dev/null
SWITCHYARD_LOG=warn "$bin" serve --listen 127.0.0.1:0 --tls-cert "$dir/cert.pem" \
  --tls-key "$dir/key.pem" > "$dir/serve.out" 2> "$dir/serve.err" &
pid=$!
for _ in $(seq 100); do grep -q '^Listening' "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^Listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$dir/serve.out")
url="https://127.0.0.1:$port/api/hubs/h/:send"
token=$("$bin" token --audience "$url" --ttl 1h | tail -1)
run() { # name calls curl-version in-flight
  local name=$1 calls=$2 version=$3 inflight=$4 extra=()
  : > "$dir/urls"
  for _ in $(seq "$calls"); do echo "url = \"$url?api-version=2022-06-01\"" >> "$dir/urls"; done
  [ "$inflight" -gt 1 ] && extra=(-Z --parallel-max "$inflight")
  local start end
  start=$(date +%s.%N)
  curl -s --no-progress-meter "$version" "${extra[@]}" --cacert "$dir/ca.pem" -X POST \
    -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
    -d '{"target":"m","arguments":["x"]}' -K "$dir/urls" -o /dev/null \
    -w '%{http_code} HTTP/%{http_version}\n' > "$dir/codes"
  end=$(date +%s.%N)
  printf '%-22s %6d calls  %6.0f/s   %s\n' "$name" "$calls" \
    "$(echo "$calls / ($end - $start)" | bc -l)" "$(sort "$dir/codes" | uniq -c | tr -s ' \n' ' ')"
}
for _ in $(seq "$rounds"); do
  run "one at a time, h1.1" "$sequential" --http1.1 1
  run "one at a time, h2" "$sequential" --http2 1
  run "50 in flight, h1.1" "$parallel" --http1.1 50
  run "50 in flight, h2" "$parallel" --http2 50
done
