#!/usr/bin/env bash
# The cost row of "Choosing one" in docs/backends.md, in one run: the same workloads
# (testing/benchshape: one goroutine's Acquire+Release cycles with a
# request context, and 64 goroutines cycling on distinct keys) on every
# backend, each on private servers on loopback:
#   redisbackend BenchmarkTopologies  single node, Sentinel (1+2) without and
#                                     with WithReplicaAck(1), Cluster 3,
#                                     Cluster 3x(1+1) with WithReplicaAck(1)
#   redlock BenchmarkRedlock          3 and 5 independent masters
#   etcdbackend BenchmarkEtcd         3 members (its own module; builds etcd)
# Every benchmark runs COUNT times (default 3) for BENCHTIME (default 1s)
# and the table shows the median of each figure; the 1-minute load average
# is printed before and after, since the figures move with it.
#
#   ./scripts/bench-backends.sh            # about 3 minutes
#   COUNT=5 BENCHTIME=2s ./scripts/bench-backends.sh
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-3}
benchtime=${BENCHTIME:-1s}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime; }
before=$(load)
echo "load average before (1, 5, 15 min): $before" >&2
bench() { # dir, pattern, package
	(cd "$1" && go test -run '^$' -bench "$2" -benchtime "$benchtime" -count "$count" "$3") | tee -a "$raw" >&2
}
bench . '^BenchmarkTopologies$' ./redisbackend/
bench . '^BenchmarkRedlock$' ./redlock/
bench etcdbackend '^BenchmarkEtcd$' .
after=$(load)
echo "load average after (1, 5, 15 min): $after" >&2

# Lines such as
#   BenchmarkRedlock/masters3/serial-2  900  1234 ns/op  350 acquire-p50-µs  600 cycle-p50-µs  810 ops/s
# become one row per backend: the medians over COUNT runs.
awk -v before="$before" -v after="$after" -v count="$count" -v benchtime="$benchtime" '
function median(list,    n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	if (n == 0) return ""
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function fmt(v, unit) {
	if (v == "") return "–"
	if (unit == "us") return (v >= 1000) ? sprintf("%.1f ms", v / 1000) : sprintf("%d µs", v)
	return commas(sprintf("%d", v + 0.5))
}
function commas(s,    out) { # 12345 -> 12,345 (mawk has no %\047d)
	while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
	return s out
}
/^Benchmark/ {
	split($1, part, "/")
	name = part[1] "/" part[2]
	sub(/-[0-9]+$/, "", part[3])
	mode = part[3]
	if (!(name in seen)) { seen[name] = 1; order[++rows] = name }
	for (i = 3; i < NF; i++) {
		if ($(i + 1) == "ops/s") vals[name, mode, "ops"] = vals[name, mode, "ops"] " " $i
		if ($(i + 1) == "acquire-p50-µs") vals[name, mode, "acq"] = vals[name, mode, "acq"] " " $i
		if ($(i + 1) == "cycle-p50-µs") vals[name, mode, "cycle"] = vals[name, mode, "cycle"] " " $i
	}
}
END {
	label["BenchmarkTopologies/single"] = "single Redis"
	label["BenchmarkTopologies/sentinel"] = "Sentinel (1 master, 2 replicas, 3 sentinels)"
	label["BenchmarkTopologies/sentinel-ack1"] = "Sentinel, `WithReplicaAck(1, 100ms)`"
	label["BenchmarkTopologies/cluster3"] = "Cluster (3 masters)"
	label["BenchmarkTopologies/cluster3x2-ack1"] = "Cluster (3 masters + 1 replica each), `WithReplicaAck(1, 100ms)`"
	label["BenchmarkRedlock/masters3"] = "Redlock, 3 masters"
	label["BenchmarkRedlock/masters5"] = "Redlock, 5 masters"
	label["BenchmarkEtcd/members3"] = "etcd, 3 members (no fsync)"
	print "| backend | acquire+release p50 | acquire p50 | 1 goroutine: cycles/s | 64 goroutines: cycles/s |"
	print "|---|---:|---:|---:|---:|"
	for (r = 1; r <= rows; r++) {
		n = order[r]
		printf "| %s | %s | %s | %s | %s |\n", (n in label) ? label[n] : n,
			fmt(median(vals[n, "serial", "cycle"]), "us"), fmt(median(vals[n, "serial", "acq"]), "us"),
			fmt(median(vals[n, "serial", "ops"]), "n"), fmt(median(vals[n, "parallel64", "ops"]), "n")
	}
	printf "\nMedians of %s runs of %s each; load average (1, 5, 15 min) %s before, %s after.\n", count, benchtime, before, after
}' "$raw"
