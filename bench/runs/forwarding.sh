#!/usr/bin/env bash
# What passing transport requests between nodes costs (docs/decisions/0006). Two layouts behind
# the same nginx, both with a redis-server:
#   direct:    every request goes to node n1 (the node that holds the connections);
#   forwarded: negotiate and REST go to n1, every transport request to n2, which passes it on
#              to n1 (the worst case of a balancer without sticky sessions).
# For each transport, switchyard-bench rest-broadcast runs the same load through nginx; the
# script prints the bench's latency line and the CPU seconds each node used.
# Usage: bench/runs/forwarding.sh [CONNECTIONS] [DURATION]   (default 1000, 20s)
set -euo pipefail
cd "$(dirname "$0")/../.."
conns="${1:-1000}"
duration="${2:-20s}"
bin=target/release/switchyard
bench=target/release/switchyard-bench
[ -x "$bin" ] && [ -x "$bench" ] || cargo build --release -p switchyard -p switchyard-bench
dir="$(mktemp -d -t switchyard-fwd-XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick="$(getconf CLK_TCK)"

redis_port="$(free_port)"
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
lb_port="$(free_port)"
ports=()
node_pids=()
for n in 1 2; do
  port="$(free_port)"
  ports+=("$port")
  SWITCHYARD_LOG=warn "$bin" serve --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$redis_port" \
    --node-id "n$n" --public-endpoint "http://127.0.0.1:$lb_port" >"$dir/n$n.out" 2>"$dir/n$n.log" &
  pids+=($!)
  node_pids+=($!)
done
sleep 1

nginx_conf() { # $1: upstream for transport requests
  cat <<EOF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
daemon off;
events { worker_connections 8192; }
worker_rlimit_nofile 16384;
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
  upstream owner { server 127.0.0.1:${ports[0]}; keepalive 64; }
  upstream transport { server 127.0.0.1:$1; keepalive 64; }
  server {
    listen 127.0.0.1:$lb_port;
    proxy_http_version 1.1;
    proxy_set_header Upgrade \$http_upgrade;
    proxy_set_header Connection \$connection_upgrade;
    proxy_set_header Host \$host;
    proxy_buffering off;
    proxy_request_buffering off;
    proxy_read_timeout 300s;
    location /client/negotiate { proxy_pass http://owner; }
    location /client { proxy_pass http://transport; }
    location / { proxy_pass http://owner; }
  }
}
EOF
}

echo "| layout | transport | delivered | lost | p50 ms | p99 ms | n1 CPU s | n2 CPU s | µs CPU/delivery (n1+n2) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for layout in direct forwarded; do
  if [ "$layout" = direct ]; then target="${ports[0]}"; else target="${ports[1]}"; fi
  nginx_conf "$target" >"$dir/nginx.conf"
  /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx-error.log" &
  nginx_pid=$!
  sleep 0.5
  for transport in ${TRANSPORTS:-websockets serversentevents longpolling}; do
    before=("$(cpu "${node_pids[0]}")" "$(cpu "${node_pids[1]}")")
    "$bench" rest-broadcast --quiet \
      --connection-string "Endpoint=http://127.0.0.1;Port=$lb_port;AccessKey=ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH;Version=1.0;" \
      --service-pid "${node_pids[0]}" -c "$conns" -s 10 -d "$duration" -t "$transport" \
      --summary-json "$dir/$layout-$transport.json" >/dev/null 2>&1
    after=("$(cpu "${node_pids[0]}")" "$(cpu "${node_pids[1]}")")
    python3 - "$dir/$layout-$transport.json" "$layout" "$transport" "$tick" \
      "${before[0]}" "${after[0]}" "${before[1]}" "${after[1]}" <<'PY'
import json, sys
path, layout, transport, tick = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
b1, a1, b2, a2 = (int(x) for x in sys.argv[5:9])
r = json.load(open(path))
cpu = ((a1 - b1) + (a2 - b2)) / tick
per = cpu * 1e6 / max(r["received"], 1)
print(f"| {layout} | {transport} | {r['received']:,} | {r['lost']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
      f"| {(a1 - b1) / tick:.2f} | {(a2 - b2) / tick:.2f} | {per:.1f} |")
PY
  done
  kill "$nginx_pid"; wait "$nginx_pid" 2>/dev/null || true
done
