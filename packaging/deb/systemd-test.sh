#!/usr/bin/env bash
# The Debian package under a real systemd: systemd is not PID 1 on CI's machine, so the test
# boots one in a container (Debian 12 with systemd, the package installed with dpkg -i, podman
# --systemd=always) and checks what the unit does with every hardening option in force: the
# service starts at boot (the package enabled it), runs as its user with only
# CAP_NET_BIND_SERVICE, no new privileges and a system-call filter, answers /api/health, logs
# to the journal, is restarted after a SIGKILL (Restart=on-failure), stops with exit status 0
# on `systemctl stop`, and `systemd-analyze security` rates it OK.
#
# Usage: packaging/deb/systemd-test.sh [--profile release|debug]   (default debug)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" -eq 0 ] || exec sudo --preserve-env=PATH "$0" "$@"
profile=debug
[ "${1:-}" = --profile ] && profile="$2"

failures=0
check() { # check DESCRIPTION COMMAND...: runs the command, says whether it held
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}
work=$(mktemp -d)
# shellcheck source=../container/podman.sh
. packaging/container/podman.sh
name=switchyard-systemd-$$
cleanup() {
  "$podman" rm -f -t 0 "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== a Debian 12 image with systemd and the package"
packaging/container/base-image.sh "$podman"
mkdir -p "$work/context"
packaging/deb/build.sh --profile "$profile" --out "$work/context" >/dev/null
cat >"$work/context/Containerfile" <<'EOF'
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends systemd systemd-sysv adduser \
 && rm -rf /var/lib/apt/lists/*
COPY switchyard_*.deb /tmp/
RUN dpkg -i /tmp/switchyard_*.deb && rm /tmp/switchyard_*.deb
CMD ["/sbin/init"]
EOF
"$podman" build --network host -t localhost/switchyard-systemd:test "$work/context" >"$work/build" 2>&1 ||
  { cat "$work/build"; exit 1; }

echo "== boot"
# Its own network namespace: the unit's port 8888 is the container's.
"$podman" run -d --name "$name" --systemd=always localhost/switchyard-systemd:test 2>&1 | quiet >/dev/null
in_container() { "$podman" exec "$name" "$@"; }
property() { in_container systemctl show -p "$1" --value switchyard; }
active() {
  for _ in $(seq 100); do
    [ "$(in_container systemctl is-active switchyard 2>/dev/null)" = active ] && return 0
    sleep 0.2
  done
  return 1
}
check "systemd starts the unit at boot (the package enabled it)" active
health() {
  for _ in $(seq 50); do
    in_container bash -c 'exec 3<>/dev/tcp/127.0.0.1/8888 && printf "GET /api/health HTTP/1.0\r\n\r\n" >&3 && head -1 <&3' 2>/dev/null |
      grep -q ' 200 ' && return 0
    sleep 0.2
  done
  return 1
}
check "it answers /api/health with 200" health
pid=$(property MainPID)
status=$(in_container cat "/proc/$pid/status")
uid=$(in_container id -u switchyard)
check "it runs as the switchyard user" grep -q "^Uid:[[:space:]]*$uid[[:space:]]" <<<"$status"
check "with CAP_NET_BIND_SERVICE only, no new privileges, a system-call filter" bash -c '
  grep -q "^CapEff:[[:space:]]*0000000000000400$" <<<"$1" && grep -q "^NoNewPrivs:[[:space:]]*1$" <<<"$1" &&
  grep -q "^Seccomp:[[:space:]]*2$" <<<"$1"' _ "$status"
check "its output is in the journal" bash -c "'$podman' exec '$name' journalctl -u switchyard --no-pager | grep -q 'Listening on 127.0.0.1:8888'"
exposure=$(in_container systemd-analyze security switchyard --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for switchyard.service: \([0-9.]*\).*/\1/p')
echo "systemd-analyze security: exposure $exposure (0 is best, 10 worst; below 2 is rated OK)"
check "systemd-analyze security rates it OK (exposure below 2)" python3 -c "import sys; sys.exit(0 if float('${exposure:-10}') < 2 else 1)"

echo "== SIGKILL, then systemctl stop"
in_container bash -c "kill -9 $pid"
restarted() {
  for _ in $(seq 100); do
    [ "$(property NRestarts)" = 1 ] && [ "$(property MainPID)" != "$pid" ] &&
      [ "$(in_container systemctl is-active switchyard)" = active ] && return 0
    sleep 0.2
  done
  return 1
}
check "a killed service is restarted (Restart=on-failure)" restarted
in_container systemctl stop switchyard
check "systemctl stop: exit status 0, result success" bash -c "
  [ \"\$('$podman' exec '$name' systemctl show -p ExecMainStatus --value switchyard)\" = 0 ] &&
  [ \"\$('$podman' exec '$name' systemctl show -p Result --value switchyard)\" = success ]"
check "it logged the graceful shutdown" bash -c "'$podman' exec '$name' journalctl -u switchyard --no-pager | grep -q 'shutting down'"

echo
if [ "$failures" -ne 0 ]; then
  echo "the unit under systemd: $failures checks failed"
  in_container journalctl -u switchyard --no-pager | tail -20
  exit 1
fi
echo "the unit under systemd: every check passed"
