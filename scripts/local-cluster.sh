#!/usr/bin/env bash
# A cluster on this machine, for development: one redis-server, N switchyard nodes sharing it,
# and nginx in front balancing round-robin without sticky sessions, with the project's own
# configuration (deploy/nginx/switchyard.conf). Everything listens on 127.0.0.1; Ctrl-C (or
# SIGTERM) stops it all.
#
# Usage: scripts/local-cluster.sh [NODES]        (default 3)
#   PORT=8888            the load balancer's port (clients, REST and app servers use it)
#   NODE_PORT=8001       the first node's port; node i listens on NODE_PORT + i - 1
#   REDIS_PORT=6390      redis-server's port; REDIS_URL=… uses a running Redis instead
#   SWITCHYARD=path      the binary (default: target/release/switchyard, built if missing)
#   LOGS=dir             where the logs go (default target/local-cluster); the last run's
#                        are replaced at start and kept after the cluster stops
# Needs redis-server (Debian: redis-server) and nginx (Debian: nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."

nodes="${1:-3}"
port="${PORT:-8888}"
node_port="${NODE_PORT:-8001}"
redis_port="${REDIS_PORT:-6390}"
bin="${SWITCHYARD:-target/release/switchyard}"
dir="${LOGS:-target/local-cluster}"
pids=()

# deploy/nginx/switchyard.conf for these ports, changed the way its header says (and
# tests/e2e/lib/cluster.js does): the `listen 127.0.0.1:8888;` line gets the balancer's address,
# the `server 127.0.0.1:800N;` lines one line per node. $1: listen address; then the nodes.
nginx_config() {
  local listen="$1"
  shift
  awk -v listen="$listen" -v servers="$*" '
    /^[ \t]*listen 127\.0\.0\.1:8888;$/ {
      match($0, /^[ \t]*/); print substr($0, 1, RLENGTH) "listen " listen ";"; listened = 1; next
    }
    /^[ \t]*server 127\.0\.0\.1:800[0-9];$/ {
      if (!served) {
        match($0, /^[ \t]*/); n = split(servers, list, " ")
        for (i = 1; i <= n; i++) print substr($0, 1, RLENGTH) "server " list[i] ";"
        served = 1
      }
      next
    }
    { print }
    END { if (!listened || !served) exit 1 }
  ' deploy/nginx/switchyard.conf
}

stop() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs kept in $dir"
  exit 0
}

if [ ! -x "$bin" ]; then
  echo "building $bin"
  cargo build --release -p switchyard
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || { echo "nginx is needed (apt-get install nginx-light)"; exit 1; }

# The last run's files only: LOGS may name a directory that holds other things.
mkdir -p "$dir"
rm -rf "$dir"/n[0-9]*.out "$dir"/n[0-9]*.log "$dir/redis.log" "$dir/nginx.conf" "$dir/nginx"
mkdir -p "$dir/nginx"
dir="$(cd "$dir" && pwd)"
trap stop EXIT INT TERM

if [ -z "${REDIS_URL:-}" ]; then
  command -v redis-server >/dev/null || { echo "redis-server is needed (apt-get install redis-server)"; exit 1; }
  redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --dir "$dir" \
    >"$dir/redis.log" 2>&1 &
  pids+=($!)
  REDIS_URL="redis://127.0.0.1:$redis_port"
  for _ in $(seq 50); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

upstreams=()
for i in $(seq "$nodes"); do
  address="127.0.0.1:$((node_port + i - 1))"
  "$bin" serve --listen "$address" --backplane "$REDIS_URL" --node-id "n$i" \
    --public-endpoint "http://127.0.0.1:$port" >"$dir/n$i.out" 2>"$dir/n$i.log" &
  pids+=($!)
  upstreams+=("$address")
done
for i in $(seq "$nodes"); do
  for _ in $(seq 100); do
    grep -q '^Listening on' "$dir/n$i.out" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '^Listening on' "$dir/n$i.out" || { echo "node n$i did not start:"; cat "$dir/n$i.log"; exit 1; }
done

nginx_config "127.0.0.1:$port" "${upstreams[@]}" >"$dir/nginx.conf" \
  || { echo "deploy/nginx/switchyard.conf has no 'listen 127.0.0.1:8888;' or 'server 127.0.0.1:800N;' line to replace"; exit 1; }
"$nginx_bin" -p "$dir/nginx" -e "$dir/nginx/error.log" -c "$dir/nginx.conf" -g 'daemon off;' &
pids+=($!)

key="$(grep -o 'AccessKey=[^;]*' "$dir/n1.out" | head -1)"
echo "Cluster of $nodes nodes on $REDIS_URL behind nginx on 127.0.0.1:$port"
echo "ConnectionString: Endpoint=http://127.0.0.1;Port=$port;$key;Version=1.0;"
echo "Dashboard: http://127.0.0.1:$port/dashboard"
echo "Nodes: ${upstreams[*]}; logs in $dir (nN.log, redis.log, nginx/error.log, nginx/access.log)"
echo "Ctrl-C stops everything."
wait -n "${pids[@]}" || true
echo "a process of the cluster exited; the last lines of the logs:"
tail -n 5 "$dir"/*.log "$dir/nginx/error.log"
