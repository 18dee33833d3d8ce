// Package testkit holds, in its subpackages, the support code of the
// repository's tests, benchmarks and measuring commands (cmd/reliability,
// cmd/accuracy): nothing a library package imports.
//
//   - redistest starts real redis-server processes (single, replicas,
//     cluster, Sentinel) on loopback for a test.
//   - faultproxy is a TCP proxy that injects network faults between a
//     client and Redis.
//   - lincheck records concurrent histories and checks them for
//     linearizability against a sequential model.
//   - reliability records the figures the reliability tests measure, for
//     cmd/reliability to render.
//   - benchkeys generates the realistic keys the keyed benchmarks use.
//   - doccheck checks that option docs name the constructors that take
//     them.
//   - fakeclock is the fake time of the tests: a *clock.Mock safe to
//     share with waiters (optionally announcing each timer), and a manual
//     clock for long timelines.
//   - eventrec is the Observer that keeps every Event, for the tests of
//     the packages above the root.
//   - outage is the client side's overload scenario: a server down for a
//     while, a population of throttled clients, and the checks of what
//     ratelimit.Throttle promises.
//   - overloadsim simulates a service under overload (workers, a queue,
//     open-loop arrivals by priority, capacity changes) behind a Gate, to
//     measure adaptive concurrency limiters in a synctest bubble.
//
// They live in the root module, under internal/, because the tests of every
// module of the repository (redislimit, grpclimit, otellimit, the examples)
// share them, and a module may import another's internal packages only from
// inside the same path prefix: here, github.com/rlkit/ratelimit/... . A
// separate module would be importable by anyone and would have to be
// released on its own.
package testkit
