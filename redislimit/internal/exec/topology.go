package exec

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster client learns its topology (which node serves which slot) from
// CLUSTER SLOTS, and reloads it when a node answers MOVED or READONLY, or
// every ClusterStateReloadInterval (a minute by default). A master that
// was killed answers nothing: without help the client would keep sending
// its slots' calls to the dead address for up to that minute, long after a
// replica took over. So a call on a Cluster client that fails for want of
// Redis asks the client to reload (go-redis runs at most one reload at a
// time in the background, and this package asks at most every
// reloadEvery): once the promoted replica is in CLUSTER SLOTS, the next
// call (the breaker's next probe) reaches it.

// reloadEvery is the least time between two reloads a Wire asks for:
// while Redis is away every call fails (the open breaker answers them at
// once), and each would otherwise start a reload.
const reloadEvery = 100 * time.Millisecond

// reloadOnFailure asks the client, when it is a Cluster client, to reload
// its topology after a call failed with err (not the caller's
// cancellation), at most once per reloadEvery.
func (w *Wire) reloadOnFailure(err error) {
	c, ok := w.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	// The clock first: while the breaker is open every call fails here,
	// and topologySuspect allocates.
	now := time.Now().UnixNano()
	last := w.reloaded.Load()
	if now-last < int64(reloadEvery) || !topologySuspect(err) || !w.reloaded.CompareAndSwap(last, now) {
		return
	}
	c.ReloadState(context.Background())
}

// topologySuspect reports whether a call's failure may come from a change
// of the cluster's topology: Redis did not answer (a dead node, a timeout,
// the open breaker), or answered that the cluster or the node cannot
// serve the slot now. Other error replies (a script error) do not.
func topologySuspect(err error) bool {
	switch {
	case errors.Is(err, errOverloaded):
		return false // the limiter's own queue
	case !isReply(err):
		return true // no answer, or the open breaker (ErrBreakerOpen is not a reply)
	}
	return hasReplyPrefix(err, topologyReplies)
}

// topologyReplies are the error replies topologySuspect blames on a
// change of the cluster's topology.
var topologyReplies = []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "READONLY"}
