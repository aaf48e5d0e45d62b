#!/bin/bash
# The figures of docs/benchmarks.md's table, measured again on this tree.
#
#   testdata/bench/figures.sh [RUNS]
#
# It builds each package's test binary once (no -race), then runs every
# benchmark of the table RUNS times (default 3), each run a process of
# its own, round by round (every benchmark once, then every benchmark
# again), so that a disturbance of the machine touches one run of each
# rather than all runs of one. Every benchmark measures its baseline in
# the same run and reports the ratio. At the end it prints, for each
# benchmark and each figure it reports, the median and the range over
# the runs; the runs' own lines are in $OUT/figures/runs.txt ($OUT
# defaults to $TMPDIR or /tmp); RUNS=0 prints them again from there.
# ONLY=regexp runs the benchmarks whose name matches. DRAIN=1 adds the
# 20,000-partition drain (drain-scale.sh) once a round, LAG=1 the
# checkpoint lag at 1,000 pgbench tps into Kafka and into files
# (pgbench-lag.sh, with cdcctl and cdc-agent built into $OUT/bin). It
# needs PostgreSQL's server programs and MariaDB's (as .ci/run installs
# them) and about half an hour on two cores (each of DRAIN and LAG adds
# about ten minutes a round); run it on an otherwise quiet machine: it
# measures the machine.
set -u
RUNS=${1:-3}
OUT=${OUT:-${TMPDIR:-/tmp}}/figures
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD

# name, package, -test.bench, -test.benchtime
BENCHES='
pg-streaming ./internal/engine/source/postgres SourceAgainstBareReader$ 4x
pg-decoding ./internal/engine/source/postgres ReaderAgainstBareDecode$ 1s
pg-catch-up ./internal/engine/source/postgres CatchUpThroughTheEngine$ 2x
pg-snapshot ./internal/engine/source/postgres SnapshotAgainstCopy$ 3x
pg-snapshot-engine ./internal/engine/source/postgres SnapshotThroughTheEngine$ 3x
pg-key-chunks ./internal/engine/source/postgres (TextKey|UUIDKey|TenantKey)Chunks$ 3x
storage-sink ./internal/engine/sink/storage StorageSink$ 5x
kafka-sink ./internal/engine/sink/kafka KafkaSink$ 30x
drain-plan ./internal/plan DrainPlanAtScale$ 2x
mysql-streaming ./internal/engine/source/mysql SourceAgainstBareReader$ 4x
mysql-snapshot ./internal/engine/source/mysql SnapshotAgainstSelect$ 2x
mysql-snapshot-source ./internal/engine/source/mysql SnapshotSourceAgainstSelect$ 3x
'
selected() {
	[ -z "${ONLY:-}" ] || [[ $1 =~ $ONLY ]]
}

[ "$RUNS" -gt 0 ] && echo "building test binaries into $OUT" >&2
[ "$RUNS" -gt 0 ] && for pkg in $(echo "$BENCHES" | awk 'NF == 4 {print $2}' | sort -u); do
	go test -c -o "$OUT/$(basename "$pkg").test" "$pkg" || exit 1
done

if [ "$RUNS" -gt 0 ] && [ -n "${LAG:-}" ]; then
	go build -o "$OUT/bin/cdcctl" ./cmd/cdcctl && go build -o "$OUT/bin/cdc-agent" ./cmd/cdc-agent || exit 1
fi
[ "$RUNS" -gt 0 ] && : > "$OUT/runs.txt"
for round in $(seq "$RUNS"); do
	echo "$BENCHES" | while read -r name pkg bench time; do
		[ -n "$name" ] && selected "$name" || continue
		echo "round $round: $name" >&2
		# A benchmark runs in its package's directory, as go test runs it.
		(cd "$ROOT/$pkg" && "$OUT/$(basename "$pkg").test" -test.run '^$' -test.bench "$bench" -test.benchtime "$time" -test.benchmem -test.timeout 30m < /dev/null) 2>&1 |
			awk -v name="$name" -v round="$round" '/^Benchmark/ {print name, round, $0}' >> "$OUT/runs.txt"
	done
	if [ -n "${DRAIN:-}" ]; then
		echo "round $round: drain-scale" >&2
		OUT=$OUT testdata/bench/drain-scale.sh "drain-$round" | sed "s/^/drain-scale $round /" >> "$OUT/runs.txt"
	fi
	if [ -n "${LAG:-}" ]; then
		for sink in kafka file; do
			echo "round $round: pgbench-lag into $sink" >&2
			SINK=$sink BIN=$OUT/bin OUT=$OUT testdata/bench/pgbench-lag.sh "lag-$sink-$round" 1000 120 10 2>&1 |
				grep -E '^(asked|lag (idle|loaded)|Verify)' | sed "s/^/pgbench-lag-$sink $round /" >> "$OUT/runs.txt"
		done
	fi
done

# Each benchmark line is "name round BenchmarkX-N iterations value unit
# value unit ...": one row per figure, then the median and range of each
# (named by the table's name: two packages have a benchmark of one name).
awk '$3 ~ /^Benchmark/ {for (i = 5; i + 1 <= NF; i += 2) print $1 "/" $3, $(i + 1), $i}' "$OUT/runs.txt" |
	sort -k1,1 -k2,2 -k3,3g |
	awk '
	function flush() {
		if (n == 0) return
		printf "%-56s %-24s median %-14s range %s – %s (%d runs)\n", key, unit, v[int((n + 1) / 2)], v[1], v[n], n
	}
	{
		if ($1 != key || $2 != unit) { flush(); key = $1; unit = $2; n = 0 }
		v[++n] = $3
	}
	END { flush() }'
grep '^drain-scale' "$OUT/runs.txt" | grep -E 'drained |checkpoint lag|verified'
grep '^pgbench-lag' "$OUT/runs.txt"
