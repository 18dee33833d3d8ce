package redislimit

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
)

// The lease table: what one process knows of the keys it leases (their
// rates, their leases, the grants in flight), with bounded memory. It
// makes no round trip: the protocol that grants and gives back leases on
// Redis is lease.go's.

// leaseTable is a generation's leases and the rates they are sized by,
// one leaseKey per tracked key. A new generation (SetPolicy) starts a new
// table, so that no lease granted under the old policy admits under the
// new one.
type leaseTable struct {
	target   time.Duration // the traffic a lease covers (LeaseConfig.Target)
	lifetime time.Duration // how long a lease is used (LeaseConfig.Lifetime)
	maxKeys  int           // the entries at most (LeaseConfig.MaxKeys)
	limit    int           // the lease cap: max(1, Limit/MaxShare)
	keys     sync.Map
	size     atomic.Int64 // entries in keys
	swept    atomic.Int64 // local ns of the last sweep made for want of room

	// mu guards ring and cursor: the entries in a slice that the sweep
	// walks a few at a time.
	mu     sync.Mutex
	ring   []*leaseKey
	cursor int

	// door is the doorkeeper: a key gets an entry only on its second
	// event within Target, so that keys decided once do not fill the
	// table. Each slot holds the local ns at which a key hashed to it
	// was first seen (0: never). Two keys sharing a slot may let one in
	// early: an entry too many, as before the doorkeeper, never a lease
	// that is not charged.
	door [leaseDoor]atomic.Int64
	seed maphash.Seed
}

// leaseDoor is the doorkeeper's size, a power of 2 (8 KiB a table).
const leaseDoor = 1024

// newLeaseTable returns an empty table whose leases cover target of a
// key's traffic, last at most lifetime and hold at most limit events, for
// at most maxKeys keys.
func newLeaseTable(target, lifetime time.Duration, maxKeys, limit int) *leaseTable {
	return &leaseTable{target: target, lifetime: lifetime, maxKeys: maxKeys, limit: limit, seed: maphash.MakeSeed()}
}

// minLease is the smallest lease worth taking: a key whose observed rate
// times Target is below it is cold and decided one script per decision.
const minLease = 2

// leaseKey is what one process knows of one key: its rate and its lease.
type leaseKey struct {
	key string

	// ring is the entry's index in leaseTable.ring, guarded by
	// leaseTable.mu (not by mu).
	ring int

	// mu guards everything below.
	mu   sync.Mutex
	dead bool // removed from the table: look the key up again

	// The rate: asked events since since (local ns), and the lease size
	// they call for, the smoothed events per Target (0: cold).
	since int64
	asked int64
	want  float64
	used  int64 // local ns of the last decision

	lease  lease
	flight *leaseFlight // the grant in flight, nil: none

	// epoch is bumped by dropLease (an admin call changed the key's state
	// in Redis): a grant sent before installs no lease when its reply
	// comes after, so its events are neither admitted nor given back.
	epoch uint64
	// fence counts the admin calls in progress on the key: meanwhile its
	// decisions are exact and nothing is granted or given back.
	fence int
	// busy counts the key's grant and give-backs in flight; quiet is
	// closed when it drops to 0 (admin calls wait for it, so that no
	// give-back lands on the state they leave).
	busy  int
	quiet chan struct{}
}

// begin counts a grant or give-back of e in flight. Requires e.mu held.
func (e *leaseKey) begin() {
	if e.busy == 0 {
		e.quiet = make(chan struct{})
	}
	e.busy++
}

// end ends what begin counted.
func (e *leaseKey) end() {
	e.mu.Lock()
	e.busy--
	if e.busy == 0 {
		close(e.quiet)
		e.quiet = nil
	}
	e.mu.Unlock()
}

// lease is a grant in use.
type lease struct {
	left      int   // events not yet admitted
	expires   int64 // local ns: not used from then on
	at        int64 // the grant's time on Redis's clock, µs: the give-back's time
	remaining int   // Redis's Remaining after the grant
	resetAt   int64 // local ns at which Redis's ResetAfter at the grant ends
}

// leaseFlight is a grant in flight; the others asking for the key wait
// for it and then use its lease, or share its denial.
type leaseFlight struct {
	done   chan struct{}
	n      int
	d      ratelimit.Decision // the asker's Decision: the denial of n, when denied
	at     int64              // the script's time on Redis's clock, Unix ns
	denied bool
	err    error
	// owner is the asker's claim on its n events of the lease: 0 until
	// either side moves, ownerGone when the asker's ctx ended first (the
	// n go back into the lease), ownerServed when the lease was
	// installed with the n taken.
	owner atomic.Int32
}

const (
	ownerGone int32 = 1 + iota
	ownerServed
)

// get returns the entry of key, making one when there is room and the
// key was seen within Target before (the doorkeeper); nil, with full
// when the table has no room, otherwise.
func (t *leaseTable) get(key string, now int64) (e *leaseKey, full bool) {
	if v, ok := t.keys.Load(key); ok {
		return v.(*leaseKey), false
	}
	if t.size.Load() >= int64(t.maxKeys) {
		return nil, true
	}
	slot := &t.door[maphash.String(t.seed, key)&(leaseDoor-1)]
	first := slot.Load()
	if first == 0 || now-first >= int64(t.target) || now < first {
		slot.Store(now)
		return nil, false
	}
	// The rate counts the event the doorkeeper saw (as one event).
	e, full = t.add(&leaseKey{key: key, since: first, used: now, asked: 1})
	return e, full
}

// add puts e in the table unless its key is there (then it returns that
// entry) or the table is full.
func (t *leaseTable) add(e *leaseKey) (*leaseKey, bool) {
	key := e.key
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.keys.Load(key); ok {
		return v.(*leaseKey), false
	}
	if t.size.Load() >= int64(t.maxKeys) {
		return nil, true
	}
	e.ring = len(t.ring)
	t.ring = append(t.ring, e)
	t.keys.Store(key, e)
	t.size.Add(1)
	return e, false
}

// note counts n events asked at now and, once per Target, updates the
// lease size they call for. Requires e.mu held.
func (e *leaseKey) note(now int64, n int, target time.Duration) {
	e.used = now
	el := now - e.since
	if el < int64(target) {
		e.asked += int64(n)
		return
	}
	// The events asked in [since, now): one per Target is a rate of one
	// per Target, not two.
	m := float64(e.asked) * float64(target) / float64(el)
	if e.want > 0 && el < 2*int64(target) {
		// Smoothed over consecutive measurements; after a pause the
		// rate is what the pause says, so that a key that went quiet
		// gets no lease sized by its old traffic.
		m = (m + e.want) / 2
	}
	e.want = m
	e.since, e.asked = now, int64(n)
}

// size returns the lease to ask for n events, 0 when the key is cold.
// Requires e.mu held.
func (e *leaseKey) size(n, capped int) int {
	if e.want < minLease {
		return 0
	}
	k := capped
	if e.want < float64(capped) {
		k = int(math.Ceil(e.want))
	}
	return max(k, n)
}

// drop forgets e's lease without giving it back and bumps e's epoch, so
// that a grant in flight installs no lease either: the key's state in
// Redis changed under it. Requires e.mu held.
func (e *leaseKey) drop() {
	e.epoch++
	e.lease = lease{}
}

// take removes the unused part of e's lease and returns it. Requires e.mu
// held.
func (e *leaseKey) take() lease {
	back := e.lease
	e.lease = lease{}
	return back
}

// decision is the Decision of an admission from e's lease at now.
// Requires e.mu held.
func (e *leaseKey) decision(limit int, now int64) ratelimit.Decision {
	return ratelimit.Decision{
		Allowed:    true,
		Limit:      limit,
		Remaining:  e.lease.left + e.lease.remaining,
		ResetAfter: time.Duration(max(e.lease.resetAt-now, 0)),
	}
}

// leaseIdle is how long a key goes without a decision before the sweep
// forgets its rate (its lease has ended long before).
func (t *leaseTable) leaseIdle() int64 { return int64(max(10*t.lifetime, time.Second)) }

// sweepTable visits up to count entries from where the last sweep
// stopped: it takes the unused events of up to room leases that have
// ended, for the caller to give back (each entry counted busy until its
// end), and forgets keys that have been idle for leaseIdle.
func (t *leaseTable) sweepTable(now int64, count, room int) (backs []leaseBack) {
	t.mu.Lock()
	for i := 0; i < count && len(t.ring) > 0; i++ {
		if t.cursor >= len(t.ring) {
			t.cursor = 0
		}
		e := t.ring[t.cursor]
		e.mu.Lock()
		if len(backs) < room && e.flight == nil && e.lease.left > 0 && now >= e.lease.expires {
			backs = append(backs, leaseBack{e, e.take()})
			e.begin()
		}
		if e.flight == nil && e.busy == 0 && e.fence == 0 && e.lease.left == 0 && now-e.used >= t.leaseIdle() {
			e.dead = true
			t.keys.Delete(e.key)
			last := t.ring[len(t.ring)-1]
			t.ring[t.cursor], last.ring = last, t.cursor
			t.ring[len(t.ring)-1] = nil
			t.ring = t.ring[:len(t.ring)-1]
			t.size.Add(-1)
			e.mu.Unlock()
			continue
		}
		e.mu.Unlock()
		t.cursor++
	}
	t.mu.Unlock()
	return backs
}

// leaseBack is a lease taken from its entry to be given back.
type leaseBack struct {
	e  *leaseKey
	ls lease
}

// roomDue reports whether a sweep of the full table for want of room is
// due at now: at most once a millisecond, so that idle keys leave room for
// new ones even when no key takes leases (and so no grant sweeps).
func (t *leaseTable) roomDue(now int64) bool {
	last := t.swept.Load()
	return now-last >= int64(time.Millisecond) && t.swept.CompareAndSwap(last, now)
}

// takeAll takes every lease of the table, for the caller to give back
// (each entry counted busy until its end).
func (t *leaseTable) takeAll() []leaseBack {
	t.mu.Lock()
	defer t.mu.Unlock()
	var backs []leaseBack
	for _, e := range t.ring {
		e.mu.Lock()
		if e.lease.left > 0 {
			backs = append(backs, leaseBack{e, e.take()})
			e.begin()
		}
		e.mu.Unlock()
	}
	return backs
}

// dropLease forgets key's lease without giving it back: an admin call
// (Reset, Block, Penalize) changed the key's state in Redis, and the lease
// must not admit on top of it. It bumps the key's epoch, so that a grant
// in flight installs no lease either.
func (t *leaseTable) dropLease(key string) {
	if v, ok := t.keys.Load(key); ok {
		e := v.(*leaseKey)
		e.mu.Lock()
		e.drop()
		e.mu.Unlock()
	}
}

// fence prepares an admin call on key: it drops the key's lease, makes
// its decisions exact (no grant, no give-back) until unfence, and waits
// for the grant and give-backs of the key in flight in this process, so
// that none lands on the state the admin call leaves. When ctx ends
// first it returns ctx.Err() (already unfenced).
func (t *leaseTable) fence(ctx context.Context, key string) (unfence func(), err error) {
	v, ok := t.keys.Load(key)
	if !ok {
		return func() { t.dropLease(key) }, nil
	}
	e := v.(*leaseKey)
	e.mu.Lock()
	e.fence++
	e.drop()
	quiet := e.quiet
	e.mu.Unlock()
	unfence = func() {
		e.mu.Lock()
		e.fence--
		e.drop()
		e.mu.Unlock()
	}
	if quiet != nil {
		select {
		case <-quiet:
		case <-ctx.Done():
			unfence()
			return nil, ctx.Err()
		}
	}
	return unfence, nil
}
