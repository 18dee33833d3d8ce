#!/usr/bin/env bash
# Runs the side-by-side comparison (this module against x/time/rate, uber and
# juju), then prints benchstat's summary and our ratios to each peer, all
# from the same run.
#
#   ./run.sh                      # BenchmarkAllow, 6 rounds, -cpu=1,2
#   COUNT=10 ./run.sh -benchtime=2s
#   BENCH='BenchmarkAllow/(xtimerate|ratelimit-tokenbucket)/' ./run.sh
#
# Environment: BENCH (regexp, default BenchmarkAllow), COUNT (rounds, 6),
# CPU (1,2), OUT (raw results; default results/<UTC time>.txt, git-ignored).
# Further arguments go to `go test`.
#
# To add a suite (Redis, keyed limiters, ...): add its benchmark pattern to
# BENCH's default below, and start any service it needs in the "services"
# section; benchratio compares every BenchmarkX/ratelimit-*/<mode> with
# BenchmarkX/<peer>/<mode>, so peers named alike are picked up by themselves.
set -euo pipefail
cd "$(dirname "$0")"

BENCH=${BENCH:-BenchmarkAllow}
COUNT=${COUNT:-6}
CPU=${CPU:-1,2}
mkdir -p results
OUT=${OUT:-results/$(date -u +%Y%m%dT%H%M%SZ).txt}
# -mod=mod lets go.sum follow the root module's requirements (replace ../).
export GOFLAGS="${GOFLAGS:-} -mod=mod"

# --- services: none yet ---

# COUNT rounds of -count=1 rather than one -count=$COUNT: every library's
# samples then spread over the whole run, so a burst of load from elsewhere
# on the machine hits all libraries alike instead of the ones that happened
# to run during it.
: >"$OUT"
for i in $(seq "$COUNT"); do
	echo "== round $i/$COUNT, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" >&2
	go test -run=NONE -bench="$BENCH" -benchmem -count=1 -cpu="$CPU" "$@" ./... | tee -a "$OUT"
done

echo
echo "== benchstat $OUT"
BENCHSTAT=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
if [ ! -x "$BENCHSTAT" ]; then
	go install golang.org/x/perf/cmd/benchstat@latest
fi
"$BENCHSTAT" "$OUT"

# ns/op is wall time; cpu-ns/op is CPU time per call, which holds up when
# other processes load the machine (compare_test.go, report).
for metric in ns/op cpu-ns/op; do
	echo
	echo "== ours / peers, $metric (medians, same run)"
	go run ./cmd/benchratio -metric "$metric" "$OUT"
done
