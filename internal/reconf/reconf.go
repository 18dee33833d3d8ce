// Package reconf holds what the in-memory and the Redis limiters must agree
// on about changes of policy (ratelimit.Keyed.SetPolicy, and SetPolicy and
// WithPrevious in package redislimit), so that both homes decide alike.
package reconf

import "time"

// Kept is the number of previous policies a limiter converts state from.
// Each change adds one; the oldest goes once every state kept under it is
// idle, or when a change would keep more than Kept. A key whose state was
// last written more than Kept changes ago, and is not idle yet, then
// starts fresh under the current policy. The bound keeps the work of every
// decision after a change constant (at most Kept probes on Redis, Kept
// older stores in memory), however often the policy changes.
const Kept = 4

// Unchanged reports whether a policy change from the policy in force, of
// zone from, to one of zone to, otherwise equal field by field, changes
// nothing: then SetPolicy with KeepUsed or ScaleUsed keeps the policy in
// force and adds no change (a configuration reload that re-applies the
// same policy must not push a key's state Kept changes back, where it
// would start fresh). Zones are the same when they are one *time.Location
// or share a name and the same offset on every day of the next two years:
// two loads of one IANA zone are different pointers.
func Unchanged(from, to *time.Location, now time.Time) bool {
	if from == to {
		return true
	}
	if from == nil || to == nil || from.String() != to.String() {
		return false
	}
	for t, end := now, now.AddDate(2, 0, 0); t.Before(end); t = t.Add(24 * time.Hour) {
		_, a := t.In(from).Zone()
		_, b := t.In(to).Zone()
		if a != b {
			return false
		}
	}
	return true
}
