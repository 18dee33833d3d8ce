// Package exec is redislimit's wire: it runs the limiter's scripts on
// Redis and says truthfully why when it could not. A [Wire] shares round
// trips between concurrent calls (batch.go), never lets go-redis retry a
// script and retries itself only what proves the script did not run
// (retry.go), optionally waits for replicas (replicaack.go), fails fast
// while Redis is unreachable (breaker.go), asks a Cluster client to reload
// its topology after a failure (topology.go) and names a refused dial as
// the cause of a timeout (dial.go).
//
// What the scripts say, and what the limiter decides when Redis could not,
// are package redislimit's.
package exec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures a [Wire].
type Config struct {
	Client  redis.UniversalClient
	Timeout time.Duration // bounds each call
	// Breaker is the breaker's cooldown; 0 turns the breaker off.
	Breaker time.Duration
	// Now is the limiter's local clock in monotonic nanoseconds, which
	// times the breaker's cooldown.
	Now func() int64
	// AckReplicas > 0 makes the round trips of calls run with ack end with
	// WAIT AckReplicas AckTimeout (see [WithReplicaAck] in redislimit).
	AckReplicas int
	AckTimeout  time.Duration
}

// Wire runs scripts on one client. It is safe for concurrent use and holds
// no goroutine while idle.
type Wire struct {
	client   redis.UniversalClient
	timeout  time.Duration
	now      func() int64
	dials    *dialRecorder // nil: the client cannot be hooked
	reloaded atomic.Int64  // Unix ns of the last Cluster topology reload asked for (topology.go)
	brk      breaker
	batch    batcher
	ackWant  int
	ackWait  time.Duration // the WAIT timeout, for errors
}

// New returns a Wire for cfg. It adds one dial hook to cfg.Client (once
// per client, see dial.go). With AckReplicas, the client must be a
// *redis.Client or a *redis.ClusterClient, whose connections WAIT can
// follow: New returns an error naming the problem for any other type.
func New(cfg Config) (*Wire, error) {
	w := &Wire{
		client:  cfg.Client,
		timeout: cfg.Timeout,
		now:     cfg.Now,
		brk:     breaker{cooldown: int64(cfg.Breaker)},
		batch: batcher{
			client:      cfg.Client,
			timeout:     cfg.Timeout,
			inline:      honoursDeadlines(cfg.Client),
			maxFlushers: defaultFlushers,
			maxBatch:    defaultMaxBatch,
			maxQueue:    defaultMaxQueue,
		},
	}
	if cfg.AckReplicas > 0 {
		switch cfg.Client.(type) {
		case *redis.Client, *redis.ClusterClient:
		case *redis.Ring:
			return nil, errors.New("WithReplicaAck is not supported on a *redis.Ring (WAIT must run on the connection of each shard)")
		default:
			// A wrapper could send the keyless WAIT on another connection
			// than the scripts', where it would count nothing unreplicated.
			return nil, fmt.Errorf("WithReplicaAck needs a *redis.Client or *redis.ClusterClient (WAIT must run on the connection that ran the scripts), got %T", cfg.Client)
		}
		w.ackWant = cfg.AckReplicas
		w.ackWait = cfg.AckTimeout
		w.batch.ackWant = cfg.AckReplicas
		w.batch.ackReplicas = cfg.AckReplicas
		w.batch.ackMillis = AckMillis(cfg.AckTimeout)
		w.batch.cluster, _ = cfg.Client.(*redis.ClusterClient)
	}
	w.dials = recorderFor(cfg.Client)
	return w, nil
}

// Acks reports whether the Wire waits for replicas on calls run with ack.
func (w *Wire) Acks() bool { return w.ackWant > 0 }

// BreakerOpen reports whether the breaker is open (or half open).
func (w *Wire) BreakerOpen() bool { return w.brk.openUntil.Load() != 0 }

// Run runs sc on keys with args, through the batcher and the breaker, and
// hands the reply to read. It returns the error of the call (the caller's
// own ctx.Err() when ctx ended it, else the truthful cause of a failure:
// a timeout, a refused dial, an error reply, the open breaker), or read's.
// With ack (and [Config.AckReplicas]) the call's round trip ends with
// WAIT, and when fewer replicas than asked acknowledged, Run returns a
// *[NotReplicatedError] after read has read the reply (which the breaker
// counts as a success: Redis answered).
func (w *Wire) Run(ctx context.Context, sc *Script, keys []string, args []any, ack bool, read func(*redis.Cmd) error) error {
	var now int64
	if w.brk.cooldown != 0 {
		now = w.now()
	}
	ok, probe, err := w.brk.allow(now)
	if !ok {
		w.reloadOnFailure(err)
		return err
	}
	c := getCall()
	c.script = sc
	c.keys = keys
	c.args = args
	c.ack = ack
	acks := 0
	if err = w.batch.do(ctx, c, w.timeout); err == nil {
		err = read(c.cmd)
		acks = c.acks
		putCall(c)
	}
	callerDone := ctx.Err() != nil
	if err != nil && !callerDone {
		w.reloadOnFailure(err)
		err = w.cause(err)
	}
	if w.brk.cooldown != 0 {
		w.brk.done(w.now(), probe, err, callerDone)
	}
	if err == nil && ack && acks < w.ackWant {
		err = &NotReplicatedError{Acks: acks, Want: w.ackWant, Timeout: w.ackWait}
	}
	return err
}

// cause turns the error of a call that tried Redis into the truthful
// cause: a timeout of the limiter's own (not the caller's) becomes a
// timeoutError, or a connectError when a dial failed meanwhile.
func (w *Wire) cause(err error) error {
	var ce *connectError
	if errors.As(err, &ce) {
		return err
	}
	var te *timeoutError
	if !errors.As(err, &te) {
		// go-redis, which never retries a script (retry.go), reports a
		// read cut short by the deadline as the network's i/o timeout.
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &ne) || !ne.Timeout()) {
			return err
		}
		te = &timeoutError{w.timeout}
	}
	if w.dials != nil {
		if f := w.dials.last.Load(); f != nil && time.Since(f.at) <= 2*w.timeout+time.Second {
			return &connectError{d: te.d, dial: f.err}
		}
	}
	return te
}

// AckMillis is d in whole milliseconds, rounded up: WAIT's timeout (whose
// 0 would mean forever).
func AckMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
