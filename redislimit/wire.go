package redislimit

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/redislimit/internal/exec"
)

// The wire (batching, safe retries, WAIT, the breaker, topology reloads,
// the dial recorder) is package internal/exec; the limiter sees it through
// the three names below.

// script is a Lua script as the wire sends it.
type script = exec.Script

// notReplicatedError is the cause when a decision's write was acknowledged
// by fewer replicas than WithReplicaAck asks for.
type notReplicatedError = exec.NotReplicatedError

func newScript(src string) *script { return exec.NewScript(src) }

// run runs script on keys with args through the wire, and hands the reply
// to read.
func (l *Limiter) run(ctx context.Context, g *generation, sc *script, keys []string, args []any, read func(*redis.Cmd) error) error {
	return l.wire.Run(ctx, sc, keys, args, false, read)
}

// runCall is run; with ack (WithReplicaAck, a decision that may admit)
// its round trip ends with WAIT, and when fewer replicas than asked
// acknowledged, runCall returns a *notReplicatedError after read has
// read the reply (which the breaker counts as a success: Redis answered).
func (l *Limiter) runCall(ctx context.Context, g *generation, sc *script, keys []string, args []any, ack bool, read func(*redis.Cmd) error) error {
	return l.wire.Run(ctx, sc, keys, args, ack, read)
}
