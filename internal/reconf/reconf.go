// Package reconf holds what the in-memory and the Redis limiters must agree
// on about changes of policy (ratelimit.Keyed.SetPolicy, and SetPolicy and
// WithPrevious in package redislimit), so that both homes decide alike.
package reconf

// Kept is the number of previous policies a limiter converts state from.
// Each change adds one; the oldest goes once every state kept under it is
// idle, or when a change would keep more than Kept. A key whose state was
// last written more than Kept changes ago, and is not idle yet, then
// starts fresh under the current policy. The bound keeps the work of every
// decision after a change constant (at most Kept probes on Redis, Kept
// older stores in memory), however often the policy changes.
const Kept = 4
