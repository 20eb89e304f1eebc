#!/usr/bin/env bash
# A real S3 server on loopback for the S3 tests: Ceph's radosgw (beast frontend) on a
# one-monitor, one-OSD mini cluster, no auth between the daemons, everything (config,
# data, logs, PID files) under one base folder.
#
#   bash test/rgw/rgw.sh install   # apt-get install radosgw ceph-mon ceph-osd (quick no-op when present)
#   bash test/rgw/rgw.sh check     # exit 0 when every program start needs is installed, else name the missing
#   bash test/rgw/rgw.sh start     # start the cluster, create the test user, print the endpoint
#   bash test/rgw/rgw.sh stop      # kill exactly the PIDs `start` recorded, and wait for them
#   bash test/rgw/rgw.sh env       # print the `export AWS_…` lines for the tests
#   bash test/rgw/rgw.sh status    # exit 0 when the server answers
#
# `npm test` and `npm run bench` (scripts/s3-server.mjs) start their own instance beside any
# other: free ports, a private mkdtemp folder as RGW_BASE, and stop it afterwards. Every
# instance keeps everything under its own RGW_BASE (PID files, admin sockets, data, logs)
# and knows its daemons by their exact `-c $RGW_BASE/ceph.conf` argument, so instances
# with different RGW_BASE, RGW_PORT and RGW_MON_PORT run side by side; the OSD picks a free
# port in Ceph's 6800-7300 range itself. `start` exits with 3 when RGW_PORT or RGW_MON_PORT
# is taken (before or while binding), so that a caller can retry on other ports.
#
# Settings (environment):
#   RGW_BASE       base folder               (default /tmp/stream-segment-rgw)
#   RGW_PORT       S3 port on 127.0.0.1       (default 17480)
#   RGW_MON_PORT   monitor port               (default 16789)
#   RGW_OSD_STORE  memstore | bluestore       (default memstore: data in RAM, up to
#                  RGW_MEM_BYTES; bluestore uses a sparse RGW_DISK_BYTES file)
#   RGW_EXTRA_CONF more ceph.conf lines for [global] (e.g. $'debug rgw = 20')
#
# The OSD store, measured on 2 cores (S3Store uploading 1 GiB in 16 MiB parts, 4 in
# flight, test/bench/s3-upload.ts, median of 3): memstore starts in ~2.7-4.5 s and takes
# ~227 MB/s; bluestore on a sparse file starts in ~6-7.5 s and takes ~163 MB/s (the
# server's CPU is the limit either way: ~7 CPU-s per GiB). memstore holds the live data
# in RAM: the OSD peaked at ~2.3 GiB RSS while 1 GiB objects were written and deleted in
# turn, and a delete frees memory once radosgw's garbage collector has run (tuned here to
# every 5 s instead of after two hours; back to ~1.2 GiB RSS). Tests delete what they write.
set -Eeuo pipefail

BASE=${RGW_BASE:-/tmp/stream-segment-rgw}
PORT=${RGW_PORT:-17480}
MON_PORT=${RGW_MON_PORT:-16789}
STORE=${RGW_OSD_STORE:-memstore}
MEM_BYTES=${RGW_MEM_BYTES:-8589934592}
DISK_BYTES=${RGW_DISK_BYTES:-42949672960}
CONF=$BASE/ceph.conf
ENDPOINT=http://127.0.0.1:$PORT
# Fixed test credentials: the server only listens on loopback.
ACCESS_KEY=stream-segment-test
SECRET_KEY=stream-segment-test-secret
RGW_NAME=client.rgw.test
DAEMONS=(rgw osd mon)
PROGRAMS=(radosgw radosgw-admin ceph-mon ceph-osd ceph monmaptool ceph-authtool curl)
PORT_IN_USE=3

log() { printf 'rgw.sh: %s\n' "$*" >&2; }
now_ms() { date +%s%3N; }

# The programs `start` needs that are not on PATH, one line.
missing_programs() {
  local bin missing=()
  for bin in "${PROGRAMS[@]}"; do
    command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
  done
  echo "${missing[*]}"
}

check() {
  local missing
  missing=$(missing_programs)
  if [ -n "$missing" ]; then
    log "missing: $missing"
    return 1
  fi
}

install() {
  local missing
  missing=$(missing_programs)
  if [ -z "$missing" ]; then
    log "already installed: $(ceph --version)"
    return 0
  fi
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "installing radosgw ceph-mon ceph-osd (missing: $missing)"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    radosgw ceph-mon ceph-osd curl
  log "installed: $(ceph --version)"
}

# The PID recorded for a daemon, if that process is still the one we started.
live_pid() {
  local f=$BASE/run/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] || return 1
  # Guard against PID reuse and against other instances: the process must be ours (one of
  # its arguments is exactly our config file; not a substring, as /x/ceph.conf is of /y/x/ceph.conf).
  local args
  mapfile -d '' -t args <"/proc/$pid/cmdline" 2>/dev/null || return 1
  local a
  for a in "${args[@]}"; do
    if [ "$a" = "$CONF" ]; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# Something accepts connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

answers() { curl -fsS -m 2 -o /dev/null "$ENDPOINT/" 2>/dev/null; }

# Starts a daemon in its own session (so it outlives this script and its caller's job),
# recording its PID. Without job control the child is not a group leader, so setsid
# does not fork and $! is the daemon itself.
start_bg() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$BASE/log/$name.out" 2>&1 &
  echo $! >"$BASE/run/$name.pid"
}

# A daemon of ours said it could not bind its port (someone took it after our check).
bind_failed() { grep -qsE 'Address already in use|unable to bind|failed to bind' "$BASE"/log/*; }

start_failed() {
  local code=1
  trap - ERR
  log "start failed; last log lines:"
  tail -n 5 "$BASE"/log/* >&2 || true
  if bind_failed; then
    log "a port was taken while binding (RGW_PORT=$PORT, RGW_MON_PORT=$MON_PORT)"
    code=$PORT_IN_USE
  fi
  stop
  exit "$code"
}

wait_for() {
  local what=$1 tries=$2
  shift 2
  for _ in $(seq 1 "$tries"); do
    "$@" && return 0
    sleep 0.2
  done
  log "timed out waiting for $what"
  return 1
}

write_conf() {
  local fsid=$1
  cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
keyring = $BASE/keyring
run dir = $BASE/run
admin socket = $BASE/run/\$name.asok
log file = $BASE/log/\$name.log
mon data = $BASE/mon.\$id
osd data = $BASE/osd.\$id
osd objectstore = $STORE
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
# The OSD is placed in the CRUSH map by this script. Left on, the OSD's own start-up
# commands for this sometimes reach the monitor before it has the monitor map ('wrong
# fsid'), and it aborts.
osd crush update on start = false
osd class update on start = false
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
# Every pool radosgw creates at start is an OSD map epoch: propose them every 50 ms,
# not every second (start takes ~3 s instead of ~14).
paxos propose interval = 0.05
paxos min wait = 0.01
memstore device bytes = $MEM_BYTES
bluestore block create = true
bluestore block size = $DISK_BYTES
bluestore cache autotune = false
bluestore cache size = 268435456
osd memory target = 1073741824
# On stop the OSD exits at once, without telling the monitor and waiting up to 5 s
# (osd mon shutdown timeout) for its answer: the data is scratch.
osd fast shutdown notify mon = false
${RGW_EXTRA_CONF:-}

[$RGW_NAME]
# tcp_nodelay: without it a small GET answer waits ~40 ms (Nagle against delayed ACKs):
# 48 ms per small GET instead of 4.
rgw frontends = beast endpoint=127.0.0.1:$PORT tcp_nodelay=1
rgw enable usage log = false
rgw enable ops log = false
rgw dynamic resharding = false
# Deleted objects' tails go to the garbage collector: collect them within seconds,
# so that memstore's memory comes back during a test run.
rgw gc obj min wait = 0
rgw gc processor period = 5
rgw gc processor max time = 5
EOF
}

start() {
  case "$BASE" in / | /tmp | /tmp/ | /root | "$HOME" | "") log "refusing RGW_BASE=$BASE" && return 1 ;; esac
  if live_pid rgw >/dev/null && answers; then
    log "already running"
    echo "$ENDPOINT"
    return 0
  fi
  stop 2>/dev/null || true
  local t0 fsid p
  t0=$(now_ms)
  for p in "$PORT" "$MON_PORT"; do
    if port_open "$p"; then
      log "port $p on 127.0.0.1 is in use (RGW_PORT=$PORT, RGW_MON_PORT=$MON_PORT; set them to free ports)"
      exit $PORT_IN_USE
    fi
  done
  # Only ever wipe a folder this script made (or an empty one, like a fresh mkdtemp).
  if [ -d "$BASE" ] && [ ! -f "$CONF" ] && [ -n "$(ls -A "$BASE")" ]; then
    log "refusing to wipe $BASE: not empty and not made by rgw.sh (set RGW_BASE)"
    return 1
  fi
  # Empty the folder, not replace it: a private (mode 0700) folder stays private.
  mkdir -p "$BASE"
  find "$BASE" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  mkdir -p "$BASE"/{mon.a,osd.0,log,run}
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$fsid"
  trap start_failed ERR

  ceph-authtool --create-keyring "$BASE/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v1:127.0.0.1:$MON_PORT]" "$BASE/monmap" >/dev/null
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$BASE/monmap" --keyring "$BASE/keyring"
  start_bg mon ceph-mon -c "$CONF" -i a -f
  # The monitor listens, or exits when its port was taken after the check above.
  wait_for "the monitor on 127.0.0.1:$MON_PORT" 150 mon_listening_or_dead
  live_pid mon >/dev/null
  local uuid id try
  uuid=$(cat /proc/sys/kernel/random/uuid)
  # The first command waits for the monitor to form its quorum, which a loaded machine can
  # take longer to do; `osd create` with the same uuid gives the same id, so it is retried.
  for try in 1 2 3; do
    id=$(timeout 30 ceph -c "$CONF" --connect-timeout 20 osd create "$uuid") && break
    log "the monitor did not answer 'osd create' in 30 s (try $try)"
  done
  [ -n "$id" ]
  local t_mon=$(($(now_ms) - t0))
  ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" >"$BASE/log/osd-mkfs.out" 2>&1
  ceph -c "$CONF" osd crush add "osd.$id" 1.0 host=localhost root=default >/dev/null 2>&1
  for try in 1 2 3; do
    start_bg osd ceph-osd -c "$CONF" -i "$id" -f
    wait_for "the OSD" 150 osd_up_or_dead
    osd_up && break
    log "the OSD exited during start (try $try): $(tail -n 2 "$BASE/log/osd.out" | tr '\n' ' ')"
  done
  osd_up
  local t_osd=$(($(now_ms) - t0))
  start_bg rgw radosgw -c "$CONF" -n "$RGW_NAME" -f
  wait_for "radosgw on $ENDPOINT" 300 rgw_answers_or_dead
  # Alive and answering (not someone else that took the port while radosgw was starting).
  live_pid rgw >/dev/null
  answers
  if ! radosgw-admin -c "$CONF" user create --uid=stream-segment-test \
    --display-name=stream-segment-test --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" \
    >"$BASE/log/user.out" 2>&1; then
    log "user create failed: $(tail -n 3 "$BASE/log/user.out")"
    false
  fi
  trap - ERR
  env_lines >"$BASE/env.sh"
  log "radosgw ($STORE) up in $(($(now_ms) - t0)) ms (monitor $t_mon, OSD $t_osd), pids $(cat "$BASE"/run/*.pid | tr '\n' ' ')"
  log "env: eval \"\$(bash $0 env)\"  (also in $BASE/env.sh)"
  echo "$ENDPOINT"
}

osd_up() { ceph -c "$CONF" --connect-timeout 5 osd stat 2>/dev/null | grep -q '1 up'; }
osd_up_or_dead() { exited osd || osd_up; }
mon_listening_or_dead() { exited mon || port_open "$MON_PORT"; }
rgw_answers_or_dead() { exited rgw || answers; }

# The daemon this start launched has exited. Not live_pid: between the fork and the exec
# the process still has this script's command line, so live_pid would call a daemon that
# is starting dead, and the OSD's retry would start a second OSD beside it (two osd.0s
# then mark each other down: "map eN had wrong client addr", placement groups stuck).
exited() {
  local pid
  pid=$(cat "$BASE/run/$1.pid" 2>/dev/null) || return 0
  ! running "$pid"
}

# The process exists and has not exited (an exited daemon can stay a zombie for a while,
# until whoever adopted it reaps it).
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

stop() {
  local name pid pids=()
  # One after the other, radosgw first: radosgw exits in ~1.5 s while the cluster is up, but
  # waits much longer when the OSD and monitor are gone first. Wait for each (up to ~5 s: the
  # data is scratch) so that the ports are free for the next start, then insist.
  for name in "${DAEMONS[@]}"; do
    if pid=$(live_pid "$name"); then
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
      for _ in $(seq 1 50); do
        running "$pid" || break
        sleep 0.1
      done
      running "$pid" && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$BASE/run/$name.pid"
  done
  [ ${#pids[@]} -eq 0 ] || log "stopped pids ${pids[*]}"
}

env_lines() {
  echo "export AWS_ENDPOINT_URL_S3=$ENDPOINT"
  echo "export AWS_ACCESS_KEY_ID=$ACCESS_KEY"
  echo "export AWS_SECRET_ACCESS_KEY=$SECRET_KEY"
  echo "export AWS_REGION=us-east-1"
}

status() {
  if answers; then
    echo "radosgw answers on $ENDPOINT"
  else
    echo "radosgw does not answer on $ENDPOINT" >&2
    return 1
  fi
}

case "${1:-}" in
install) install ;;
check) check ;;
start) start ;;
stop) stop ;;
env) env_lines ;;
status) status ;;
*)
  echo "usage: $0 install|check|start|stop|env|status" >&2
  exit 2
  ;;
esac
