#!/bin/bash
# Replication lag of a PostgreSQL changefeed under pgbench at a fixed rate
# (docs/benchmarks.md, "pgbench at a fixed rate").
#
#   testdata/bench/pgbench-lag.sh LABEL [RATE] [SECONDS] [SCALE]
#
# It starts `cdcctl playground --postgres --no-demo --nodes 2` (NODES) on port
# base 9600 under $OUT/LABEL ($OUT defaults to $TMPDIR or /tmp), removes
# the playground's changefeed demo-pg (so that one changefeed runs), creates
# database bench with `pgbench -i -s SCALE` (default 10: 1,000,000
# accounts), and changefeed bench of its four tables (pgbench_history gets
# REPLICA IDENTITY FULL: it has no key) into a file:// sink with
# flush-interval=1s, or with SINK=kafka into topic bench of the
# playground's Kafka broker (--kafka: kfake on port 9613). It then samples the changefeed's checkpoint lag every
# 0.5 s: first 20 s idle (the baseline of the same run: the floor a tick
# and the checkpoint cadence give), then while `pgbench -c 4 -j 2 -R RATE
# -T SECONDS` runs (default 1000 tps for 60 s). It prints the lag's p50 and
# p99 idle and under load, their ratio, and the rate pgbench sustained,
# and ends with `cdcctl verify` (every table rebuilt from the sink equals
# PostgreSQL's). cdcctl, cdc-agent and pgbench come from the PATH ($BIN
# first). Run it on an otherwise quiet machine.
set -u
LABEL=$1; RATE=${2:-1000}; DUR=${3:-60}; SCALE=${4:-10}
SINK=${SINK:-file}; NODES=${NODES:-2}
OUT=${OUT:-${TMPDIR:-/tmp}}
export PATH=${BIN:+$BIN:}$PATH:$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)
D=$OUT/$LABEL
rm -rf "$D"; mkdir -p "$D"
case $SINK in
  file) SINK_URI="file://$D/sink?flush-interval=1s"; KAFKA= ;;
  kafka) SINK_URI="kafka://127.0.0.1:9613/bench"; KAFKA=--kafka ;;
  *) echo "SINK is file or kafka, not $SINK" >&2; exit 64 ;;
esac
cdcctl playground --nodes "$NODES" --postgres $KAFKA --no-demo --port-base 9600 --dir "$D/pg" --sink-root "$D" > "$D/playground.out" 2>&1 &
PG=$!
trap 'kill -INT $PG; wait $PG' EXIT
export CDCCTL_SERVER=$(seq -s, -f '127.0.0.1:96%02g' 1 "$NODES")
cdcctl cluster wait --nodes "$NODES" --timeout 90s > /dev/null || exit 1
PSQL="psql -X -A -t -h 127.0.0.1 -p 9610 -U postgres"
for _ in $(seq 60); do $PSQL -d postgres -c 'SELECT 1' > /dev/null 2>&1 && break; sleep 1; done
$PSQL -d postgres -c 'CREATE DATABASE bench' > /dev/null
# The playground's own changefeed demo-pg (and its walsender, which
# decodes all of pgbench's WAL too) is load this benchmark does not
# measure: it goes, its workload (20 transfers a second) stays.
cdcctl changefeed wait demo-pg --advance 1s --timeout 120s > /dev/null || exit 1
cdcctl changefeed remove demo-pg --yes > /dev/null || exit 1
pgbench -h 127.0.0.1 -p 9610 -U postgres -i -q -s "$SCALE" bench > "$D/init.out" 2>&1 || { cat "$D/init.out"; exit 1; }
$PSQL -d bench -c 'ALTER TABLE pgbench_history REPLICA IDENTITY FULL' > /dev/null
cdcctl changefeed create bench --partitions-per-table 2 \
  --source 'postgres://postgres@127.0.0.1:9610/bench?sslmode=disable&tables=public.pgbench_*' \
  --sink "$SINK_URI" > "$D/create.out" || exit 1
cdcctl changefeed wait bench --advance 3s --timeout 600s > /dev/null || exit 1
# The initial snapshot (1,000,000 accounts at scale 10) must be done
# before the idle baseline: a copy in flight is load.
for _ in $(seq 600); do
  cdcctl changefeed get bench -o jsonpath='{.source_status.snapshot}' | grep -q '^done' && break
  sleep 1
done
sample() { # seconds → lag samples (ms), one a line
  local end=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    cdcctl changefeed get bench -o jsonpath='{.checkpoint_lag_ms}'
    sleep 0.5
  done
}
sample 20 > "$D/idle.ms"
pgbench -h 127.0.0.1 -p 9610 -U postgres -c 4 -j 2 -R "$RATE" -T "$DUR" -n bench > "$D/pgbench.out" 2>&1 &
PB=$!
sample "$DUR" > "$D/load.ms"
wait $PB
cdcctl changefeed wait bench --advance 3s --timeout 120s > /dev/null
cdcctl verify --changefeed bench --wait 3m > "$D/verify.out"; VRC=$?
python3 - "$D" "$RATE" "$SINK" <<'PY'
import sys, re
d, rate = sys.argv[1], sys.argv[2]
def q(f):
    v = sorted(int(x) for x in open(f"{d}/{f}").read().split())
    return v[len(v)//2], v[min(len(v)-1, int(len(v)*0.99))], len(v)
i50, i99, n_i = q("idle.ms"); l50, l99, n_l = q("load.ms")
tps = re.search(r"tps = ([0-9.]+)", open(f"{d}/pgbench.out").read())
print(f"sink {sys.argv[3]}")
print(f"asked {rate} tps, pgbench sustained {tps.group(1) if tps else '?'} tps")
print(f"lag idle   p50 {i50} ms  p99 {i99} ms  ({n_i} samples)")
print(f"lag loaded p50 {l50} ms  p99 {l99} ms  ({n_l} samples)")
print(f"ratio loaded/idle: p50 {l50/i50:.2f}  p99 {l99/i99:.2f}")
PY
grep -E 'Verify|pgbench_' "$D/verify.out"
exit $VRC
