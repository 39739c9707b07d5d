#!/usr/bin/env bash
# A cluster on this machine, for development: one redis-server, N switchyard nodes sharing it,
# and nginx in front balancing round-robin without sticky sessions. Everything listens on
# 127.0.0.1; Ctrl-C (or SIGTERM) stops it all.
#
# Usage: scripts/local-cluster.sh [NODES]        (default 3)
#   PORT=8888            the load balancer's port (clients, REST and app servers use it)
#   REDIS_PORT=6390      redis-server's port; REDIS_URL=… uses a running Redis instead
#   SWITCHYARD=path      the binary (default: target/release/switchyard, built if missing)
# Needs redis-server (Debian: redis-server) and nginx (Debian: nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."

nodes="${1:-3}"
port="${PORT:-8888}"
redis_port="${REDIS_PORT:-6390}"
bin="${SWITCHYARD:-target/release/switchyard}"
dir="$(mktemp -d -t switchyard-cluster-XXXXXX)"
pids=()

stop() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
  exit 0
}
trap stop EXIT INT TERM

if [ ! -x "$bin" ]; then
  echo "building $bin"
  cargo build --release -p switchyard
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || { echo "nginx is needed (apt-get install nginx-light)"; exit 1; }

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

upstreams=""
for i in $(seq "$nodes"); do
  node_port=$((port + i))
  "$bin" serve --listen "127.0.0.1:$node_port" --redis "$REDIS_URL" --node-id "n$i" \
    --public-endpoint "http://127.0.0.1:$port" >"$dir/n$i.out" 2>"$dir/n$i.log" &
  pids+=($!)
  upstreams="$upstreams server 127.0.0.1:$node_port;"
done
for i in $(seq "$nodes"); do
  for _ in $(seq 100); do
    grep -q '^Listening on' "$dir/n$i.out" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '^Listening on' "$dir/n$i.out" || { echo "node n$i did not start:"; cat "$dir/n$i.log"; exit 1; }
done

# The same settings as docs/cluster.md's example: WebSocket upgrades passed on, responses
# streamed (Server-Sent Events), long polls held.
mkdir -p "$dir/nginx"
cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/nginx/body;
  proxy_temp_path $dir/nginx/proxy;
  fastcgi_temp_path $dir/nginx/fastcgi;
  uwsgi_temp_path $dir/nginx/uwsgi;
  scgi_temp_path $dir/nginx/scgi;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
  upstream switchyard { $upstreams }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://switchyard;
      proxy_http_version 1.1;
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection \$connection_upgrade;
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
      proxy_send_timeout 300s;
    }
  }
}
EOF
"$nginx_bin" -p "$dir/nginx" -c "$dir/nginx.conf" -e "$dir/nginx-error.log" &
pids+=($!)

key="$(grep -o 'AccessKey=[^;]*' "$dir/n1.out" | head -1)"
echo "Cluster of $nodes nodes on $REDIS_URL behind nginx on 127.0.0.1:$port"
echo "ConnectionString: Endpoint=http://127.0.0.1;Port=$port;$key;Version=1.0;"
echo "Nodes: $(seq -s ' ' -f "127.0.0.1:%g" $((port + 1)) $((port + nodes))); logs in $dir"
echo "Ctrl-C stops everything."
wait -n "${pids[@]}" || true
if [ -d "$dir" ]; then
  echo "a process of the cluster exited; the last lines of the logs:"
  tail -n 5 "$dir"/*.log
fi
