#!/bin/bash
# The end-to-end scale measurement of docs/benchmarks.md ("One changefeed
# of 30,000 one-partition tables" and its 100,000-table runs).
#
#   testdata/bench/big-changefeed.sh LABEL SECONDS [TABLES]
#
# It starts `cdcctl playground --no-demo` on port base 9500 under
# $OUT/LABEL ($OUT defaults to $TMPDIR or /tmp), creates changefeed big
# (gen source, TABLES one-partition tables, default 100000, 2,000 changes
# a second, file:// sink with flush-interval=5s), and every ~5 s writes a
# line to $OUT/LABEL/samples: seconds since create, checkpoint lag (ms),
# the maintainer's capture, and each agent's RSS and CPU. At the end it
# prints the lag's p50, p90 and max after 3 minutes, saves each agent's
# storage sink metrics, and with VERIFY=1 pauses the
# changefeed and runs `cdcctl verify`. PROF_AT=N takes a 20 s CPU profile
# (and a heap profile) of the maintainer's capture (capture-1 while the
# API is too busy to say which), and a CPU profile of another capture, N
# seconds in. cdcctl and cdc-agent come from $BIN
# (default: the PATH). It stops the playground it started. Run it on an
# otherwise quiet machine: it measures the whole machine.
set -u
LABEL=$1; DUR=$2; TABLES=${3:-100000}
OUT=${OUT:-${TMPDIR:-/tmp}}
CDCCTL=${BIN:+$BIN/}cdcctl
D=$OUT/$LABEL
rm -rf "$D"; mkdir -p "$D"
$CDCCTL playground --no-demo --port-base 9500 --dir "$D/pg" > "$D/playground.out" 2>&1 &
PG=$!
S=127.0.0.1:9501,127.0.0.1:9502,127.0.0.1:9503
for _ in $(seq 60); do
  $CDCCTL --server $S cluster status >/dev/null 2>&1 && break; sleep 1
done
sleep 3
T0=$(date +%s)
$CDCCTL --server $S changefeed create big --source "gen://?tables=$TABLES&keys=2&rate=2000&ddl_every=0s" \
  --partitions-per-table 1 --sink "file://$D/pg/sinks/big?flush-interval=5s" > "$D/create.out" 2>&1
echo "create rc=$? after $(( $(date +%s) - T0 )) s" | tee -a "$D/samples"
PIDS=$(python3 -c "import json;d=json.load(open('$D/pg/playground.json'));print(' '.join(str(c['pid']) for c in d['captures']))")
echo "pids $PIDS" >> "$D/samples"
declare -A LASTCPU
CURLS=""
while [ $(( $(date +%s) - T0 )) -lt "$DUR" ]; do
  sleep 5
  NOW=$(( $(date +%s) - T0 ))
  LAG=$($CDCCTL --server $S --request-timeout 5s changefeed get big -o json 2>/dev/null | python3 -c "import json,sys
try:
  d=json.load(sys.stdin); print(d.get('checkpoint_lag_ms'), d.get('maintainer'))
except Exception: print('? ?')")
  LINE="t=$NOW lag_ms/maint=$LAG"
  for p in $PIDS; do
    R=$(awk '/VmRSS/{print int($2/1024)}' /proc/$p/status 2>/dev/null)
    C=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null)
    L=${LASTCPU[$p]:-$C}; LASTCPU[$p]=$C
    # CPU ticks (1/100 s) over the ~5 s between samples, as a percentage.
    LINE="$LINE | $p rss=${R}M cpu=$(( (C-L) / 5 ))%"
  done
  echo "$LINE" >> "$D/samples"
  if [ -n "${PROF_AT:-}" ] && [ "$NOW" -ge "$PROF_AT" ] && [ ! -e "$D/cpu.prof" ]; then
    # The maintainer's capture, or capture-1 (the coordinator) while the
    # API is too busy to say.
    M=$(echo "$LAG" | awk '{print $2}'); N=${M#capture-}
    case "$N" in [1-3]) ;; *) N=1 ;; esac
    O=$(( N % 3 + 1 ))
    curl -s -o "$D/cpu.prof" "127.0.0.1:950$N/debug/pprof/profile?seconds=20" & CURLS="$CURLS $!"
    curl -s -o "$D/heap.prof" "127.0.0.1:950$N/debug/pprof/heap" & CURLS="$CURLS $!"
    curl -s -o "$D/cpu-other.prof" "127.0.0.1:950$O/debug/pprof/profile?seconds=20" & CURLS="$CURLS $!"
  fi
done
[ -n "$CURLS" ] && wait $CURLS
for i in 1 2 3; do
  curl -s --max-time 10 127.0.0.1:950$i/metrics | grep -E '^cdcctl_storage_(flush_tasks_total|active_tables|backlog)' > "$D/metrics-$i.txt"
done
if [ -n "${VERIFY:-}" ]; then
  $CDCCTL --server $S changefeed pause big >> "$D/verify.out" 2>&1
  sleep 10
  V0=$(date +%s)
  $CDCCTL --server $S --request-timeout 60s verify --changefeed big >> "$D/verify.out" 2>&1
  echo "verify rc=$? in $(( $(date +%s) - V0 )) s" >> "$D/verify.out"
fi
kill $PG
wait $PG
# The figures docs/benchmarks.md reports: the lag after 3 minutes (the
# start-up burst of every table's first row is over by then).
python3 - "$D/samples" <<'PY'
import re, sys
lags = []
for line in open(sys.argv[1]):
    m = re.match(r"t=(\d+) lag_ms/maint=(\d+) ", line)
    if m and int(m.group(1)) >= 180:
        lags.append(int(m.group(2)))
lags.sort()
if lags:
    q = lambda p: lags[min(len(lags) - 1, len(lags) * p // 100)] / 1000
    print(f"lag after 3 min: p50 {q(50):.1f} s, p90 {q(90):.1f} s, max {lags[-1]/1000:.1f} s ({len(lags)} samples)")
else:
    print("no lag sampled after 3 min")
PY
