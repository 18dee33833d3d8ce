// Command envoyrls is envoyproxy/ratelimit's rate limit service, built at the
// version pinned in this directory's go.mod with the dependency versions its
// authors chose (this is its own module, so they do not reach the benchmarks
// module). It is configured as the upstream service is, by environment
// variables (REDIS_URL, RUNTIME_ROOT, GRPC_PORT, ...); see envoy_servers_test.go in
// the parent directory, which builds and starts it.
package main

import (
	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
)

func main() {
	r := runner.NewRunner(settings.NewSettings())
	r.Run()
}
