#!/bin/sh
# Check stoker-watch.service under a real systemd where none runs as PID 1
# (a container, a CI runner): boot systemd as PID 1 of a private PID and
# mount namespace whose /run is a fresh, empty tmpfs, as after a reboot;
# start the unit there, then stop it, and print what systemd says, e.g.
#   result: start=active mapping=made stop=inactive/success/0
# (the unit is active after its start, has made /run/stoker/job-mapping, and
# after systemctl stop is inactive, not failed, its main process's exit 0).
# The unit runs STOKER watch with --nvml none on 127.0.0.1 instead of :9400;
# its other lines are used as they are. Needs root, unshare(1) and systemd,
# and a host where systemd is not PID 1 (there, a second one would share
# the host's cgroups: test with the host's systemd instead); else it says
# why it skipped and exits 0. The host is touched only where systemd
# touches it at boot: the cgroup directories it makes at the top of each
# hierarchy are removed at the end.
# Usage: test-in-namespace.sh [STOKER [UNIT]]
set -u
stk=${1:-$(command -v stoker)}
unit=${2:-$(cd "$(dirname "$0")" && pwd)/stoker-watch.service}
sd=/lib/systemd/systemd
skip() { echo "skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null && [ -x $sd ] && [ -x "$stk" ] ||
  skip "needs root, unshare, $sd and a stoker binary"
[ ! -d /run/systemd/system ] || skip "systemd is this host's PID 1: test the unit with it"
unshare --pid --fork --mount --propagation private true 2>/dev/null ||
  skip "cannot make PID and mount namespaces here"
tmp=$(mktemp -d)
tops() { for h in /sys/fs/cgroup/*/; do ls -d "$h"init.scope "$h"system.slice 2>/dev/null; done; }
tops >"$tmp/before"
mkdir "$tmp/units"
for t in h sysinit basic shutdown network-online multi-user; do
  printf '[Unit]\nDescription=%s (stoker test)\n' $t >"$tmp/units/$t.target"
done
port=$((19400 + $$ % 500))
sed "s|^ExecStart=[^ ]* watch --listen [^ ]*|ExecStart=$stk watch --nvml none --listen 127.0.0.1:$port|" \
  "$unit" >"$tmp/units/stoker-watch.service"
cat >"$tmp/boot.sh" <<EOF
mount -t tmpfs tmpfs /run && mount -t proc proc /proc || exit 1
export container=stoker-test SYSTEMD_UNIT_PATH=$tmp/units
exec $sd --system --unit=h.target --log-target=null
EOF
unshare --pid --fork --mount --uts --ipc --propagation private sh "$tmp/boot.sh" >"$tmp/log" 2>&1 &
outer=$!
pid1=
for _ in $(seq 100); do
  pid1=$(pgrep -P $outer | head -1)
  [ -n "$pid1" ] && nsenter -t "$pid1" -m -p systemctl is-system-running >/dev/null 2>&1 && break
  sleep 0.1
done
in_ns() { nsenter -t "$pid1" -m -p "$@"; }
rc=0
if [ -z "$pid1" ] || ! in_ns systemctl is-system-running >/dev/null 2>&1; then
  echo "systemd did not come up:"; cat "$tmp/log"; rc=1
else
  in_ns test -e /run/stoker && echo "/run/stoker exists before the start: not a fresh /run"
  in_ns systemctl start stoker-watch.service 2>&1
  started=$(in_ns systemctl is-active stoker-watch.service)
  mapping=missing
  in_ns test -d /run/stoker/job-mapping && mapping=made
  # Stop only once it serves: a process killed by SIGTERM before it set up
  # its handler counts as a clean stop, whatever the handler would do.
  for _ in $(seq 50); do
    [ "$started" = active ] || break
    curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$port/metrics" && break
    sleep 0.1
  done
  in_ns systemctl status --no-pager stoker-watch.service 2>&1 | grep -E 'Process:|Main PID:' | sed 's/^ */  /'
  in_ns systemctl stop stoker-watch.service
  show() { in_ns systemctl show -p "$1" --value stoker-watch.service; }
  echo "result: start=$started mapping=$mapping stop=$(show ActiveState)/$(show Result)/$(show ExecMainStatus)"
fi
[ -n "$pid1" ] && kill -9 "$pid1" 2>/dev/null
wait $outer 2>/dev/null
tops | while read -r d; do
  grep -qxF "$d" "$tmp/before" || find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
done
rm -rf "$tmp"
exit $rc
