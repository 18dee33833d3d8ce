package exec

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// Retries. A script whose reply was lost (the connection reset or closed,
// a read timed out) may have run: sending it again could charge its events
// twice, an over-count that a rate limiter must never make on its own. So
// every script goes to go-redis as a scriptCmd, which go-redis never
// retries (its Cmder.NoRetry; Client, ClusterClient and Ring honour it, for
// commands and pipelines alike; a ClusterClient still follows MOVED and
// ASK, which mean the script did not run there). The limiter retries
// itself, within the call's timeout, only the errors that prove the
// script did not run (unexecuted): then a lost reply costs at most an
// under-admission (the events were charged, the caller got the failure
// policy), never an over-admission.

// MaxAttempts bounds the sends of one script run, NOSCRIPT's EVAL aside.
const MaxAttempts = 3

// Script is a Lua script of redislimit: go-redis's Script (EVALSHA,
// Load, ...) plus its hash and source boxed once as command arguments, so
// that sending it boxes neither.
type Script struct {
	*redis.Script
	hash, src any
}

// NewScript returns the Script of src.
func NewScript(src string) *Script {
	s := redis.NewScript(src)
	return &Script{Script: s, hash: s.Hash(), src: src}
}

// The command names, boxed once.
var (
	evalShaArg any = "evalsha"
	evalArg    any = "eval"
)

// scriptCmd is one run of a script as a go-redis command that go-redis
// never retries.
type scriptCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command: its reply may have been
// lost after the script ran.
func (*scriptCmd) NoRetry() bool { return true }

// prepare returns c's script run as a command: EVALSHA, or EVAL once the
// server said NOSCRIPT (c.eval). It reuses c's argument slice and command
// wrapper: the new *redis.Cmd is the only allocation besides the keys'.
func (c *call) prepare(ctx context.Context) redis.Cmder {
	a := c.argv[:0]
	if c.eval {
		a = append(a, evalArg, c.script.src)
	} else {
		a = append(a, evalShaArg, c.script.hash)
	}
	a = append(a, len(c.keys))
	for _, k := range c.keys {
		a = append(a, k)
	}
	a = append(a, c.args...)
	c.argv = a
	cmd := redis.NewCmd(ctx, a...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3) // for Cluster routing
	}
	c.cmd = cmd
	c.sc.Cmd = cmd
	return &c.sc
}

// send runs the scripts of calls on the client once, one call as a
// command and several as one pipeline, each as a command go-redis never
// retries; a call whose script the server did not have (NOSCRIPT) is sent
// again at once with EVAL. On return each call's cmd holds its reply or its
// error. The retries of errors proving the script did not run are the
// caller's (batcher.do), on its own goroutine, so that a call waiting to be
// retried holds up neither the other calls of its batch nor a flusher.
func (b *batcher) send(ctx context.Context, calls []*call) {
	pending := calls
	for {
		b.round(ctx, pending)
		var next []*call // allocated only when a script was missing
		for _, c := range pending {
			if !c.eval && isNoScript(c.cmd.Err()) {
				c.eval = true
				next = append(next, c)
			}
		}
		if next == nil {
			return
		}
		pending = next
	}
}

// round sends calls once: one as a command, several in a pipeline.
func (b *batcher) round(ctx context.Context, calls []*call) {
	if b.ackWant > 0 && needsAck(calls) {
		b.roundAck(ctx, calls)
		return
	}
	if len(calls) == 1 {
		_ = b.client.Process(ctx, calls[0].prepare(ctx)) // the error is the command's
		return
	}
	pipe := b.client.Pipeline()
	for _, c := range calls {
		_ = pipe.Process(ctx, c.prepare(ctx)) // queues it
	}
	_, _ = pipe.Exec(ctx) // errors are per command
}

// retryBackoff is the wait before attempt (2 or 3) of a call bounded by
// timeout: a twentieth of it, then a fifth, so that three attempts and
// their backoffs fit well within the timeout.
func retryBackoff(timeout time.Duration, attempt int) time.Duration {
	if attempt <= 2 {
		return timeout / 20
	}
	return timeout / 5
}

// pause waits d unless ctx ends first (then it returns false); it does
// not wait at all when deadline or ctx's deadline comes before d has
// passed.
func pause(ctx context.Context, d time.Duration, deadline time.Time) bool {
	if time.Until(deadline) <= d || timesrc.Outlasts(ctx, d) {
		return false
	}
	return timesrc.Sleep(ctx, nil, d) == nil
}

// unexecuted reports whether err proves that the script did not run (so
// that sending it again cannot charge twice): no connection could be had
// (a failed dial, the pool's timeout), or an error reply that Redis gives
// before running a script or at the script's first write, before anything
// was written (the scripts read before they write, and on Redis 7 a script
// without flags fails at its first write call on a replica, without
// enough replicas, or while the server loads its data).
//
// A reply lost after the request was written (reset, EOF, a read timeout)
// is not one of them: the script may have run.
//
// A nil err (the common case, asked after every call) returns at once:
// the errors.As targets below live on the heap.
func unexecuted(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	return isReply(err) && hasReplyPrefix(err, unexecutedReplies)
}

// hasReplyPrefix reports whether the error reply err starts with one of
// prefixes (as go-redis's HasErrorPrefix compares them).
func hasReplyPrefix(err error, prefixes []string) bool {
	for _, p := range prefixes {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// unexecutedReplies are the error replies unexecuted retries. go-redis's
// HasErrorPrefix drops an "ERR " first, hence "max number of clients".
// MOVED and ASK reach the limiter only from a Cluster node's own client
// (WithReplicaAck), which does not follow them.
var unexecutedReplies = []string{
	"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS",
	"max number of clients", "MOVED", "ASK",
}
