package exec

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Replica acknowledgement (WithReplicaAck). A round trip that carries a
// decision which may admit ends with WAIT on the connection that ran its
// scripts: WAIT counts the replicas that acknowledged everything written
// on that connection so far, so one WAIT covers every script before it.
// On a Cluster, a ClusterClient pipeline would send a keyless WAIT to any
// node; the calls are grouped per master instead, each group a pipeline on
// that master's own client ending with its WAIT (a MOVED reply there means
// the script did not run: see unexecuted).

// ackCmd is the WAIT command; like the scripts, go-redis never retries it.
type ackCmd struct{ *redis.IntCmd }

// NoRetry tells go-redis not to retry WAIT (nor the pipeline holding it).
func (*ackCmd) NoRetry() bool { return true }

// needsAck reports whether some call of calls waits for replicas.
func needsAck(calls []*call) bool {
	for _, c := range calls {
		if c.ack {
			return true
		}
	}
	return false
}

// roundAck sends calls once, each group of calls that share a connection
// followed by WAIT, and records in each call that waits for replicas how
// many acknowledged (-1 when WAIT failed).
func (b *batcher) roundAck(ctx context.Context, calls []*call) {
	if b.cluster == nil {
		b.pipeAck(ctx, b.client, calls)
		return
	}
	groups := make(map[*redis.Client][]*call)
	for _, c := range calls {
		node, err := b.cluster.MasterForKey(ctx, c.keys[0])
		if err != nil {
			c.prepare(ctx)
			c.cmd.SetErr(err)
			continue
		}
		groups[node] = append(groups[node], c)
	}
	if len(groups) == 1 {
		for node, cs := range groups {
			b.pipeAck(ctx, node, cs)
		}
		return
	}
	var wg sync.WaitGroup
	for node, cs := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.pipeAck(ctx, node, cs)
		}()
	}
	wg.Wait()
}

// pipeAck sends calls and WAIT in one pipeline of client.
func (b *batcher) pipeAck(ctx context.Context, client redis.Cmdable, calls []*call) {
	pipe := client.Pipeline()
	for _, c := range calls {
		_ = pipe.Process(ctx, c.prepare(ctx))
	}
	wait := &ackCmd{redis.NewIntCmd(ctx, "wait", b.ackReplicas, b.ackMillis)}
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	acks, err := wait.Result()
	if err != nil {
		acks = -1
	}
	if b.cluster != nil {
		for _, c := range calls {
			if err := c.cmd.Err(); redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
				b.cluster.ReloadState(ctx) // the retry asks the new owner
				break
			}
		}
	}
	for _, c := range calls {
		if c.ack {
			c.acks = int(acks)
		}
	}
}
