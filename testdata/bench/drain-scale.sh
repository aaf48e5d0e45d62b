#!/bin/bash
# The drain at scale of docs/benchmarks.md ("20,000 partitions, batch 8").
#
#   testdata/bench/drain-scale.sh LABEL [FEEDS] [BATCH]
#
# It runs TestDrainAtScale (internal/agent) at the issue's size: FEEDS
# changefeeds (default 200) of 25 tables × 4 partitions, 5 changes a
# second each, three captures, etcd and every dispatcher in one process;
# one capture (a third of the partitions) is drained with --batch BATCH
# (default 8) while the checkpoint lag of every changefeed is sampled
# every 500 ms, from 10 s before the drain (the baseline of the same run)
# to its end. After the drain, the first VERIFY changefeeds (default 20)
# are paused and verified: every event in per-key order, duplicates
# counted. The test's own log goes to $OUT/LABEL/test.log ($OUT defaults
# to $TMPDIR or /tmp, and the sinks' files go to $TMPDIR: a tmpfs keeps
# their thousand small files a second off a shared disk); this prints its
# summary lines: placed and warm, the drain's time, the lag before and
# during it and their p99 ratio, the plan, what was verified. PROF=1 also
# writes CPU profiles of 20 s steady and of the drain's first 20 s beside
# the log; DUMP=1 writes every lag sample taken during the drain to
# lags.txt beside it, a line each: milliseconds since the drain began,
# changefeed, lag in milliseconds, its maintainer's epoch (whether the
# whole distribution moves, or a few changefeeds). Run it on an otherwise
# quiet machine: it measures the machine.
set -u
LABEL=$1; FEEDS=${2:-200}; BATCH=${3:-8}
OUT=${OUT:-${TMPDIR:-/tmp}}
D=$OUT/$LABEL
rm -rf "$D"; mkdir -p "$D"
cd "$(dirname "$0")/../.." || exit 1
PROFILE=
[ -n "${PROF:-}" ] && PROFILE=$D/cpu
CDCCTL_SCALE_FEEDS=$FEEDS CDCCTL_SCALE_TABLES=25 CDCCTL_SCALE_BATCH=$BATCH CDCCTL_SCALE_RATE=5 \
  CDCCTL_SCALE_VERIFY=${VERIFY:-20} CDCCTL_SCALE_CPUPROFILE=$PROFILE CDCCTL_SCALE_DUMP=${DUMP:+$D/lags.txt} \
  go test -count=1 -run 'TestDrainAtScale$' -v -timeout 60m ./internal/agent > "$D/test.log" 2>&1
RC=$?
grep -E '^ *drain_scale_test.go:[0-9]+: (created|placed in|warm after|drained |checkpoint lag|plan .*maintainer moves|verified)|^(--- FAIL|FAIL|panic)' "$D/test.log"
echo "exit $RC; log $D/test.log"
exit $RC
