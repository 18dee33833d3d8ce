// Package benchmarks compares this module with other Go rate-limiting
// libraries in one `go test -bench` run, so that the numbers share a
// machine, a load and a moment. It lives in its own module so that the
// libraries it compares against never reach the root go.mod.
//
// Suites: BenchmarkAllow (one limiter; compare_test.go),
// BenchmarkConcurrency (a concurrency limit against x/sync/semaphore;
// concurrency_test.go), BenchmarkKeyed
// (per-key limiting in memory, with bytes per key; keyed_test.go),
// BenchmarkRedis (redis_test.go), BenchmarkHTTP (middleware;
// http_test.go), BenchmarkGRPCUnary and BenchmarkGRPCBufconn (server
// interceptors, called directly and over bufconn; grpc_test.go). Each file
// says what is measured and why the configurations compare.
//
// TestOverload and TestOutage (overload_test.go, throttle_test.go) compare
// adaptive concurrency limiting and client-side throttling with
// failsafe-go's, simulated in testing/synctest bubbles; TestOverloadCharts
// draws docs/overload-*.svg.
//
// Run ./run.sh for every suite in rounds; it writes RESULTS.md with medians,
// ratios ours/theirs (cmd/benchratio) and benchstat's summary. README.md
// says how to read them.
package benchmarks
