// Package benchmarks compares this module's limiters with other Go
// rate-limiting libraries in one `go test -bench` run, so that the numbers
// share a machine, a load and a moment. It lives in its own module so that
// the libraries it compares against never reach the root go.mod.
//
// Run ./run.sh for the comparison with benchstat's summary; see
// compare_test.go for what is measured and why the configurations match.
package benchmarks
