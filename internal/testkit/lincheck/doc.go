// Package lincheck records concurrent histories of rate-limiting decisions
// and checks them for linearizability with github.com/anishathalye/porcupine
// against the in-memory limiter of the same [ratelimit.Policy], used as the
// sequential reference.
//
// A history is a set of operations, each an AllowN (or Peek) call for a key
// and n with its call and return times ([Recorder]) and the Decision it
// returned. It is linearizable when every key's operations can be put in
// one sequential order that respects real time (an operation that returned
// before another was called comes first) and in which each operation
// returns exactly the Decision the reference limiter returns when the
// operations are replayed on it in that order ([NewModel]).
//
// # Time is an input
//
// A limiter's decision depends on the time it reads. Here that time is not
// observed but given: the limiters under test read a manual clock
// (fakeclock.Manual) that holds still while the operations of a phase run
// concurrently, and moves only between phases, when every operation of the phase has returned (a
// barrier). Each operation's Input carries the limiter time T it ran at,
// and the model replays it at T. So the check covers the atomicity of
// decisions (no lost update, no stale read, no double charge among
// operations that overlap) and their order across phases, but not how a
// limiter reads a clock that moves while calls are in flight: a limiter
// that read the wrong time would be caught only if the time it read
// differed from the phase's T. Within a phase all operations share one T,
// and across phases the real-time order and the order of T agree, so a
// linearization never runs time backwards (the model refuses one that
// would).
//
// # The model
//
// The state is an immutable record of the operations applied so far (a
// persistent linked list of nodes). Step replays them on a fresh reference
// limiter with its clock set to each operation's T, then applies the new
// operation and compares Decisions field by field. Replays are cached:
// each node keeps, once, the reference limiter that reached its state, and
// the reference Decision of every input tried on it, so a depth-first
// search that goes on from a node costs one call, and one that backtracks
// replays once per node, not once per attempt.
//
// Two states are equal when they hold the same operations at each instant
// T with the same outputs, in any order within an instant (compared by a
// 64-bit hash): operations at one instant commute in the state of every
// algorithm (they only add to what was consumed at that instant, and a
// denial consumes nothing), which lets porcupine prune the many orders of
// one phase's operations. Step also refuses an operation x while a
// pending operation q that consumes nothing (a denial, a Peek) could run
// now and would return its recorded Decision here, if x consumes or was
// called after q: some linearization always runs q first (the exchange
// argument is at refuse in model.go). Without that rule the search tries
// every subset of the denials that pile up at the end of a phase before
// it backtracks past a wrong admission (measured: up to 33 s for one
// 640-operation history, under 0.1 s with it). Both only prune the
// search: were either wrong (or two hashes collide), the checker could
// report a violation that is not one, never pass a history that is not
// linearizable, because every linearization it accepts was replayed
// exactly.
//
// For Redis the durations are compared at the precision Redis keeps
// ([WithPrecision]): its scripts work in whole microseconds and round
// RetryAfter and ResetAfter up to the microsecond, which equals the
// in-memory duration rounded up (see package redislimit, Time); operation
// times must then be whole microseconds.
//
// An operation that returned an error never matches: the checks run
// fault-free, where no call should fail.
package lincheck
