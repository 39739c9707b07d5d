#!/usr/bin/env bash
# Builds the Debian packages, installs them on this machine, and checks what an operator gets:
# the user, the configuration file (a fresh key, mode 0640, kept on reinstall), the unit
# (systemd-analyze verify), the service started as the unit starts it (its ExecStart, as its
# user, without privileges) with the official client connected, a graceful stop on SIGTERM,
# and a purge that leaves nothing behind. Runs as root (through sudo when started as another
# user); refuses to touch a switchyard package that was installed before it ran.
#
# Usage: packaging/deb/test.sh [--profile release|debug]   (default debug: what CI has built)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" -eq 0 ] || exec sudo --preserve-env=PATH "$0" "$@"
profile=debug
[ "${1:-}" = --profile ] && profile="$2"
failures=0
check() { # check DESCRIPTION COMMAND...: runs the command, says whether it held
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}

# dpkg refuses to run while another dpkg or apt holds its lock (other jobs on a shared machine
# install packages too): wait for it, up to two minutes, rather than fail.
dpkg_waiting() {
  local output
  for _ in $(seq 120); do
    if output=$(dpkg "$@" 2>&1); then
      printf '%s\n' "$output"
      return 0
    fi
    grep -q 'lock' <<<"$output" || { printf '%s\n' "$output"; return 1; }
    sleep 1
  done
  printf '%s\n' "$output"
  return 1
}

if dpkg-query -W -f='${Status}' switchyard 2>/dev/null | grep -q installed; then
  echo "a switchyard package is installed on this machine already; not touching it" >&2
  exit 1
fi

work=$(mktemp -d)
service_pid=
cleanup() {
  [ -n "$service_pid" ] && kill "$service_pid" 2>/dev/null || true
  dpkg_waiting --purge switchyard switchyard-bench >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building the packages ($profile binaries)"
mapfile -t debs < <(packaging/deb/build.sh --profile "$profile" --out "$work/debs")
printf '%s\n' "${debs[@]}"
deb_service=${debs[0]}
contents=$(dpkg-deb -c "$deb_service")
info=$(dpkg-deb -I "$deb_service")
check "the package holds the binary, the unit, the maintainer scripts and the docs" bash -c '
  grep -q "\./usr/bin/switchyard$" <<<"$1" &&
  grep -q "\./usr/lib/systemd/system/switchyard.service$" <<<"$1" &&
  grep -q "\./usr/share/doc/switchyard/docs/configuration.md$" <<<"$1" &&
  grep -q "\./usr/share/doc/switchyard/THIRD-PARTY-LICENSES.md$" <<<"$1" &&
  grep -q "Depends: libc6 (>= [0-9.]*).*, adduser" <<<"$2" && grep -q " postinst " <<<"$2"' _ "$contents" "$info"

echo "== dpkg -i"
dpkg_waiting -i "${debs[@]}"
config=/etc/switchyard/switchyard.toml
check "a system user and group switchyard, without a shell or a home" bash -c '
  entry=$(getent passwd switchyard) && uid=$(echo "$entry" | cut -d: -f3) && [ "$uid" -lt 1000 ] &&
  case "$(echo "$entry" | cut -d: -f7)" in */nologin|*/false) true ;; *) false ;; esac &&
  [ "$(echo "$entry" | cut -d: -f6)" = /nonexistent ] && getent group switchyard >/dev/null'
check "$config is root:switchyard, mode 0640, in a folder of mode 0750" bash -c "
  [ \"\$(stat -c '%U:%G %a' $config)\" = 'root:switchyard 640' ] &&
  [ \"\$(stat -c '%U:%G %a' /etc/switchyard)\" = 'root:switchyard 750' ]"
key=$(sed -n 's/^access_key = "\(.*\)"$/\1/p' "$config")
check "the file has a fresh access key of 44 characters, not the Emulator's" bash -c "
  [ \${#1} -eq 44 ] && [ \"\$1\" != ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH ]" _ "$key"
check "the service user can read the file, others cannot" bash -c "
  setpriv --reuid switchyard --regid switchyard --init-groups cat $config >/dev/null &&
  ! setpriv --reuid nobody --regid nogroup --clear-groups cat $config >/dev/null 2>&1"
dpkg_waiting -i "$deb_service" >/dev/null
check "a reinstall keeps the file and its key" bash -c "
  [ \"\$(sed -n 's/^access_key = \"\\(.*\\)\"\$/\\1/p' $config)\" = \"\$1\" ]" _ "$key"
unit=/usr/lib/systemd/system/switchyard.service
if command -v systemd-analyze >/dev/null; then
  check "systemd-analyze verify accepts the unit" systemd-analyze verify "$unit"
else
  echo "skipped: systemd-analyze verify (systemd-analyze is not installed)"
fi
check "switchyard-bench is installed by its own package" bash -c \
  "switchyard-bench --help >/dev/null && dpkg -S /usr/bin/switchyard-bench | grep -q '^switchyard-bench:'"

echo "== the service, started as the unit starts it"
# systemd is not PID 1 here, so the unit's ExecStart runs under setpriv with the unit's user,
# group, no-new-privileges and umask. One change: SWITCHYARD_LISTEN binds port 0, as tests do.
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
user=$(sed -n 's/^User=//p' "$unit")
group=$(sed -n 's/^Group=//p' "$unit")
(
  umask "$(sed -n 's/^UMask=//p' "$unit")"
  # shellcheck disable=SC2086 # the ExecStart line is words, as systemd splits it
  exec env -i PATH=/usr/bin:/bin SWITCHYARD_LISTEN=127.0.0.1:0 \
    setpriv --reuid "$user" --regid "$group" --init-groups --no-new-privs $exec_start \
    >"$work/stdout" 2>"$work/stderr"
) &
service_pid=$!
for _ in $(seq 100); do
  grep -q '^Listening on ' "$work/stdout" 2>/dev/null && break
  kill -0 "$service_pid" 2>/dev/null || break
  sleep 0.1
done
cat "$work/stdout"
port=$(sed -n 's/^Listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/stdout")
[ -n "$port" ] || { echo "the service did not start:"; cat "$work/stderr"; exit 1; }
# env and setpriv exec, so the subshell's process is the service itself.
check "it runs as the switchyard user and group, with no capabilities" bash -c "
  [ \"\$(ps -o user:32=,group:32= -p $service_pid | tr -s ' ')\" = 'switchyard switchyard' ] &&
  grep -q '^CapEff:[[:space:]]*0*\$' /proc/$service_pid/status"
check "its connection string hides the key (not development mode)" \
  grep -q 'AccessKey=<access_key>' "$work/stdout"
check "/api/health answers 200" node -e \
  "fetch('http://127.0.0.1:$port/api/health').then((r) => process.exit(r.status === 200 ? 0 : 1))"

(cd packaging/test && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
endpoint=http://127.0.0.1:$port
check "the official client connects with the installed key and receives a REST send" \
  node packaging/test/smoke-client.mjs "$endpoint" "$key"
check "a token signed with the Emulator's key is refused" bash -c \
  "! node packaging/test/smoke-client.mjs $endpoint ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH >/dev/null"

node packaging/test/smoke-client.mjs "$endpoint" "$key" --hold >"$work/held" &
held=$!
for _ in $(seq 100); do grep -q '^connected' "$work/held" && break; sleep 0.1; done
# SIGTERM to the service itself (what systemd's KillSignal sends to the main process).
kill -TERM "$service_pid"
status=0
wait "$service_pid" || status=$?
service_pid=
wait "$held" || true
cat "$work/held"
check "SIGTERM stops it with exit status 0" test "$status" -eq 0
check "its client got the service's Close, not a broken socket" grep -q '^closed by the service' "$work/held"
check "it logged the shutdown" grep -q 'shutting down' "$work/stderr"

echo "== dpkg --purge"
dpkg_waiting --purge switchyard switchyard-bench
check "nothing of the package is left: binaries, unit, configuration, user, group" bash -c '
  [ ! -e /usr/bin/switchyard ] && [ ! -e /usr/bin/switchyard-bench ] && [ ! -e '"$unit"' ] &&
  [ ! -e /etc/switchyard ] && [ ! -e /usr/share/doc/switchyard ] &&
  ! getent passwd switchyard >/dev/null && ! getent group switchyard >/dev/null &&
  ! dpkg-query -W -f="\${Status}" switchyard 2>/dev/null | grep -q installed'

echo
if [ "$failures" -ne 0 ]; then
  echo "Debian package: $failures checks failed"
  exit 1
fi
echo "Debian package: every check passed"
