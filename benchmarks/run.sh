#!/usr/bin/env bash
# Runs every side-by-side suite of this module in rounds, then writes
# RESULTS.md (medians, ratios ours/theirs, benchstat) and prints the ratios.
#
#   ./run.sh                                # everything: 5 rounds, -benchtime=1s (about 25 min)
#   QUICK=1 ./run.sh                        # 1 round, 200ms: checks the script (a few minutes)
#   SUITES=Keyed LIBS='ratelimit-tokenbucket|sethvargo' ./run.sh
#
# Suites are BenchmarkAllow and BenchmarkConcurrency (run with -cpu=1,2),
# BenchmarkKeyed, BenchmarkRedis, BenchmarkRedisLease, BenchmarkHTTP,
# BenchmarkGRPCUnary and BenchmarkGRPCBufconn (run with -cpu=2). For the suites with a "bare" baseline (HTTP, gRPC) it
# also reports what each middleware adds to bare, round by round. The Redis
# suite runs against a redis-server this script starts on a free loopback
# port and stops on exit; without redis-server (apt-get install redis-server
# redis-tools) it is skipped and RESULTS.md says so.
#
# Environment:
#   COUNT      rounds (5); each round runs every suite once (-count=1)
#   BENCHTIME  -benchtime (1s)
#   SUITES     suites to run ("Allow Concurrency Keyed Redis RedisLease HTTP
#              GRPCUnary GRPCBufconn")
#   LIBS       regexp of libraries to run within each suite (all)
#   CPU        -cpu for every suite (default: 1,2 for Allow and Concurrency, 2
#              for the others)
#   RESULTS    Markdown report to write (RESULTS.md; with QUICK=1 a file in
#              $TMPDIR, so a trial run does not overwrite the committed one)
#   OUT        raw results (results/<UTC time>.txt, git-ignored)
# Further arguments go to the test binary, e.g. -test.benchmem=false.
set -euo pipefail
cd "$(dirname "$0")"

if [ -n "${QUICK:-}" ]; then
	COUNT=${COUNT:-1}
	BENCHTIME=${BENCHTIME:-200ms}
	RESULTS=${RESULTS:-${TMPDIR:-/tmp}/ratelimit-bench-quick.md}
fi
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-1s}
SUITES=${SUITES:-Allow Concurrency Keyed Redis RedisLease HTTP GRPCUnary GRPCBufconn}
LIBS=${LIBS:-}
RESULTS=${RESULTS:-RESULTS.md}
mkdir -p results
OUT=${OUT:-results/$(date -u +%Y%m%dT%H%M%SZ).txt}
# This module as its go.mod says, not the repository's go.work (which
# refuses -mod=mod); -mod=mod lets go.sum follow the requirements of the
# modules it replaces with ../ (the root module, redislimit, grpclimit).
export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=mod"

START=$(date +%s)
START_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'; }
START_LOAD=$(load)

TMP=$(mktemp -d)
REDIS_PID=
BENCH_PID=
cleanup() {
	if [ -n "$BENCH_PID" ]; then
		kill "$BENCH_PID" 2>/dev/null || true
		wait "$BENCH_PID" 2>/dev/null || true
	fi
	if [ -n "$REDIS_PID" ]; then
		kill "$REDIS_PID" 2>/dev/null || true
		wait "$REDIS_PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build: one test binary for every round, so rounds measure the same
# code and no compiler runs beside a benchmark.
echo "== building" >&2
go test -c -o "$TMP/bench.test" .
go build -o "$TMP/benchratio" ./cmd/benchratio
BENCHSTAT=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
if [ ! -x "$BENCHSTAT" ]; then
	go install golang.org/x/perf/cmd/benchstat@latest
fi

# --- services: a throwaway redis-server for BenchmarkRedis, persistence off,
# on a free loopback port.
REDIS_NOTE=
start_redis() {
	local port i
	for _ in $(seq 20); do
		port=$((20000 + RANDOM % 40000))
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue # in use
		fi
		redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
			--dir "$TMP" --logfile "$TMP/redis.log" &
		REDIS_PID=$!
		for i in $(seq 100); do
			if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
				export REDIS_ADDR=127.0.0.1:$port
				REDIS_NOTE="redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port, started by run.sh (no persistence)"
				return 0
			fi
			if ! kill -0 "$REDIS_PID" 2>/dev/null; then
				break # exited: port taken after all
			fi
			sleep 0.05
		done
		kill "$REDIS_PID" 2>/dev/null || true
		wait "$REDIS_PID" 2>/dev/null || true
		REDIS_PID=
	done
	return 1
}
suites=()
for s in $SUITES; do
	# BenchmarkRedis and BenchmarkRedisLease share one redis-server.
	if [ "$s" = Redis ] || [ "$s" = RedisLease ]; then
		if [ -z "$REDIS_PID" ]; then
			if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
				REDIS_NOTE="skipped: redis-server or redis-cli not installed"
				echo "== Benchmark$s $REDIS_NOTE" >&2
				continue
			fi
			unset REDIS_ADDR
			if ! start_redis; then
				REDIS_NOTE="skipped: could not start redis-server"
				echo "== Benchmark$s $REDIS_NOTE" >&2
				continue
			fi
			echo "== $REDIS_NOTE" >&2
		fi
	fi
	suites+=("$s")
done
if [ ${#suites[@]} -eq 0 ]; then
	echo "no suite to run" >&2
	exit 1
fi

cpu_of() {
	if [ -n "${CPU:-}" ]; then
		echo "$CPU"
	elif [ "$1" = Allow ] || [ "$1" = Concurrency ]; then
		echo 1,2
	else
		echo 2
	fi
}
bench_of() {
	if [ -n "$LIBS" ]; then
		echo "^Benchmark$1\$/($LIBS)/"
	else
		echo "^Benchmark$1\$"
	fi
}

# COUNT rounds of -count=1 rather than one -count=$COUNT: every library's
# samples then spread over the whole run, so a burst of load from elsewhere
# on the machine hits all libraries alike instead of the ones that happened
# to run during it.
: >"$OUT"
mkfifo "$TMP/fifo"
LOADS=()
FAILED=()
for i in $(seq "$COUNT"); do
	LOADS+=("$(load)")
	echo "== round $i/$COUNT, load ${LOADS[-1]}" >&2
	for s in "${suites[@]}"; do
		# In the background and waited for, so that a signal stops the run at
		# once (bash runs traps only between foreground commands).
		tee -a "$OUT" <"$TMP/fifo" &
		TEE_PID=$!
		"$TMP/bench.test" -test.run=NONE -test.bench="$(bench_of "$s")" -test.benchmem \
			-test.count=1 -test.cpu="$(cpu_of "$s")" -test.benchtime="$BENCHTIME" "$@" >"$TMP/fifo" &
		BENCH_PID=$!
		# A failing suite is reported, not fatal: the other numbers still hold.
		if ! wait "$BENCH_PID"; then
			FAILED+=("Benchmark$s in round $i")
			echo "== Benchmark$s FAILED in round $i" >&2
		fi
		BENCH_PID=
		wait "$TEE_PID"
	done
done
END_LOAD=$(load)
MINUTES=$(( ($(date +%s) - START + 30) / 60 ))

if ! grep -q '^Benchmark' "$OUT"; then
	echo "no benchmark results in $OUT; $RESULTS left as it was" >&2
	exit 1
fi
"$BENCHSTAT" "$OUT" >"$TMP/benchstat.txt"
echo
echo "== benchstat $OUT"
cat "$TMP/benchstat.txt"
METRICS=(ns/op cpu-ns/op server-µs/op redis-calls/op bytes/key allocs/op)
for m in "${METRICS[@]}"; do
	echo
	echo "== ours / theirs, $m (medians, same run)"
	"$TMP/benchratio" -metric "$m" "$OUT"
done
# Added costs: the suites with a bare baseline (a handler alone).
ADDED_METRICS=()
if grep -q '^Benchmark[A-Za-z]*/bare/' "$OUT"; then
	ADDED_METRICS=(ns/op cpu-ns/op allocs/op)
fi
for m in "${ADDED_METRICS[@]}"; do
	echo
	echo "== added to bare, $m (per-round differences, same run)"
	"$TMP/benchratio" -minus bare -metric "$m" "$OUT"
done

# --- RESULTS.md
cmd="./run.sh"
for v in COUNT BENCHTIME SUITES LIBS CPU; do
	case "$v=${!v:-}" in
	COUNT=5 | BENCHTIME=1s | "SUITES=Allow Concurrency Keyed Redis RedisLease HTTP GRPCUnary GRPCBufconn" | LIBS= | CPU=) ;;
	*) cmd="$v='${!v}' $cmd" ;;
	esac
done
if [ $# -gt 0 ]; then
	cmd="$cmd $*"
fi
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
suite_list=
for s in "${suites[@]}"; do
	suite_list+="${suite_list:+, }Benchmark$s (-cpu=$(cpu_of "$s"))"
done
{
	echo "# Benchmark results"
	echo
	echo "Side-by-side comparison of this module with other Go rate limiters; what is compared"
	echo "and how to read it: [README.md](README.md). Written by \`run.sh\`; regenerate with:"
	echo
	echo '```'
	echo "cd benchmarks && $cmd"
	echo '```'
	echo
	echo "| | |"
	echo "|---|---|"
	echo "| date | $START_DATE |"
	echo "| Go | $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH) |"
	echo "| CPU | ${cpu_model:-unknown}, $(nproc) logical CPUs |"
	echo "| suites | $suite_list |"
	echo "| Redis | ${REDIS_NOTE:-not run} |"
	echo "| rounds | $COUNT × -count=1, -benchtime=$BENCHTIME; every number below is the median of the rounds |"
	echo "| duration | $MINUTES min |"
	if [ ${#FAILED[@]} -gt 0 ]; then
		echo "| failed | $(IFS=';'; echo "${FAILED[*]}" | sed 's/;/; /g') (see the raw output) |"
	fi
	echo "| load average (1, 5, 15 min) | start $START_LOAD; rounds $(IFS=';'; echo "${LOADS[*]}" | sed 's/;/; /g'); end $END_LOAD |"
	echo
	echo "The machine is a shared 2-core VM: other processes ran during the run whenever the"
	echo "load average above exceeds about 2. Compare numbers within this file, not with other runs;"
	echo "cpu-ns/op (CPU time per call) holds up better than ns/op (wall time) under load."
	echo
	echo "## Ratios, ours / theirs"
	echo
	echo "Each row is one of this module's benchmarks, each pair of columns a library of the same"
	echo "suite in the same mode and GOMAXPROCS (procs): its median and the ratio ours / theirs"
	echo "(below 1: ours is cheaper). \"ok\" and \"MISS\" mark the issues' targets."
	if [[ " ${suites[*]} " == *" Keyed "* ]]; then
		echo
		echo "BenchmarkKeyed measures 1M keys two ways. **\`1Mrandom/*\`** (random order, fresh key"
		echo "bytes; issue 14) is the shape of real traffic: 1,000,000 keys of 14-24 bytes inserted in a"
		echo "shuffled order, then looked up in random order, each key's bytes freshly written into a"
		echo "scratch buffer (hot in cache, not the string the limiter stored). **\`1Mkeys/*\`**"
		echo "(round-robin, stored strings; the old measure, kept for comparison with earlier runs) visits"
		echo "1,000,000 10-byte keys in the order they were inserted and passes the very strings the"
		echo "limiter stored, which spares every library cache misses that real traffic pays."
		echo "\`hotkey/*\` is one key. The 1M-key targets apply to 1Mrandom; 1Mkeys has none."
	fi
	for m in "${METRICS[@]}"; do
		echo
		echo "### $m"
		"$TMP/benchratio" -md -metric "$m" "$OUT"
	done
	if [ ${#ADDED_METRICS[@]} -gt 0 ]; then
		echo
		echo "## Added cost over bare"
		echo
		echo "For the suites with a \`bare\` baseline (the handler alone): what each middleware or"
		echo "interceptor adds to it. Each round's bare sample is subtracted from the same round's"
		echo "sample (taken seconds apart); the number is the median of those differences, \`range\`"
		echo "their smallest and largest, which shows how far noise reaches: an added cost inside"
		echo "bare's own noise is not resolved. Ratios are ours / theirs of the added costs."
		for m in "${ADDED_METRICS[@]}"; do
			echo
			echo "### $m added"
			"$TMP/benchratio" -md -minus bare -metric "$m" "$OUT"
		done
	fi
	echo
	echo "## Medians"
	"$TMP/benchratio" -md -medians "$OUT"
	echo
	echo "## benchstat"
	echo
	echo "Medians with 95% confidence intervals over the rounds (\`benchstat $OUT\`)."
	echo
	echo "<details><summary>benchstat output</summary>"
	echo
	echo '```'
	cat "$TMP/benchstat.txt"
	echo '```'
	echo
	echo "</details>"
} >"$TMP/results.md"
# Written whole or not at all.
mv "$TMP/results.md" "$RESULTS"
echo
echo "== wrote $RESULTS and $OUT in $MINUTES min" >&2
