package redislimit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// Sentinel failover under load (issue 12): a master, its replicas and three
// sentinels on loopback (internal/testkit/redistest.StartSentinel); 4 processes x
// 32 goroutines on go-redis's failover client call AllowN on one key whose
// limit cannot refill during the run (a token bucket of burst L refilling
// one event per hour); the master is SIGKILLed under load once a third of
// the key is spent, and the run goes on until the key is spent on the new
// master and then for a final phase.
//
// Measured (binding semantics 3): events admitted beyond L (writes the
// replica never got), calls that failed or fell back, recovery (the kill
// until the end of the last failed call), p50/p99/max latency of the calls
// that started in that window.

const (
	failoverProcs      = 4
	failoverGoroutines = 32
	// failoverTimeout is the limiter's WithTimeout in these scenarios: far
	// above a healthy round trip even on a loaded two-CPU machine under
	// -race, so that every failure comes from the fault.
	failoverTimeout = time.Second
	// failoverFinal is how long the load goes on after the key is spent.
	failoverFinal = time.Second
)

// sentinelScenario is one Sentinel failover scenario.
type sentinelScenario struct {
	id, title  string
	replicas   int
	dataArgs   []string // redis-server arguments of every data node
	failure    string   // loadSpec.Failure
	replicaAck int      // WithReplicaAck replicas (0: off) ...
	ackTimeout time.Duration
	// cut > 0 cuts the replication links cut before the master is killed:
	// the master stops serving SYNC and PSYNC (an ACL rule on its default
	// user) and drops its replicas (CLIENT KILL TYPE replica), so they lag
	// by the writes of that time at the kill, deterministically. The fault
	// then starts at the cut. (Stopping the replicas with SIGSTOP does not
	// do it: the kernel's socket buffers keep the stream, and a continued
	// replica reads it all, even after the master's death.)
	cut time.Duration
}

// sentinelRun is one run's figures.
type sentinelRun struct {
	loadStats
	failover  time.Duration // the kill until every sentinel named the new master
	healthy   time.Duration // the kill until the final master was in place with its replicas (see WaitHealthy)
	newMaster string
	killedAt  int64 // events used when the master was killed
}

// runSentinelFailover runs sc once and returns its figures. It fails t
// when the run could not be set up as intended (the key spent before the
// kill, or never spent after it), not on the figures.
func runSentinelFailover(t *testing.T, sc sentinelScenario, limit int) sentinelRun {
	t.Helper()
	sn := redistest.StartSentinel(t, redistest.SentinelReplicas(sc.replicas), redistest.SentinelDataArgs(sc.dataArgs...))
	spec := loadSpec{
		MasterName:        sn.MasterName(),
		Sentinels:         sn.SentinelAddrs(),
		Algorithm:         "tokenbucket",
		Limit:             limit,
		Window:            time.Hour,
		Timeout:           failoverTimeout,
		Failure:           sc.failure,
		Instances:         failoverProcs,
		ReplicaAck:        sc.replicaAck,
		ReplicaAckTimeout: sc.ackTimeout,
		NoDenyCache:       true, // every decision from Redis, the final phase's too
		Prefix:            uniquePrefix(t),
		Key:               "failover",
		N:                 1,
		Goroutines:        failoverGoroutines,
		// An upper bound: each process stops DeniedFor after the key is
		// spent on the new master, which follows the failover however
		// long that takes (up to redistest.PromotionTimeout, and the wait
		// for the replicas after it).
		Duration:  2 * time.Minute,
		Pause:     20 * time.Millisecond,
		DeniedFor: failoverFinal,
	}

	// The parent watches the key on the master and kills it once a third
	// of the limit is spent: load is up and quota remains to be spent
	// after the failover, whatever the machine's speed.
	master, err := sn.Master()
	if err != nil {
		t.Fatal(err)
	}
	mc := redis.NewClient(&redis.Options{Addr: master, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer mc.Close()
	p, _ := spec.policy()
	watch, err := New(mc, p, WithPrefix(spec.Prefix), WithTimeout(failoverTimeout), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	var run sentinelRun
	fault := func(ctx context.Context) time.Time {
		for {
			d, err := watch.Peek(ctx, spec.Key, 0)
			if err == nil && limit-d.Remaining >= limit/3 {
				run.killedAt = int64(limit - d.Remaining)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the load never spent a third of the key: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		var cutAt time.Time
		if sc.cut > 0 {
			cutAt = time.Now()
			cutReplication(t, sn.Servers()[0])
			time.Sleep(sc.cut)
		}
		_, at := sn.KillMaster(t)
		sn.WaitFailover(t, master, redistest.PromotionTimeout)
		run.failover = time.Since(at)
		// Healthy again: one master, with the replicas WithReplicaAck
		// needs, for longer than a sentinel takes to deem it down. Seen on
		// a loaded machine: a sentinel deems the just-promoted master
		// down and fails over a second time; the demoted master then
		// rejoins as a replica only ~10 s later (+convert-to-slave).
		var healthyAt time.Time
		run.newMaster, healthyAt = sn.WaitHealthy(t, sc.replicaAck, 2*redistest.SentinelDownAfter, 60*time.Second)
		run.healthy = healthyAt.Sub(at)
		if sc.cut > 0 {
			return cutAt
		}
		return at
	}
	run.loadStats = runLoad(t, spec, failoverProcs, 0, fault)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sentinel logs:\n%s", sn.Logs())
		}
	})
	st := run.loadStats
	t.Logf("%s: %v; killed with %d of %d spent, sentinels switched after %v, healthy after %v", sc.id, st, run.killedAt, limit, run.failover, run.healthy)
	if st.FirstDenyEnd == 0 {
		t.Fatalf("the key was never spent after the failover (admitted %d of %d): the run cannot show the decisions exact again\n%s",
			st.Admitted, limit, st.slotTable(0, time.Hour))
	}
	return run
}

// cutReplication makes master refuse SYNC and PSYNC and drops its
// replicas: they stay disconnected (each retry fails) while clients go on.
func cutReplication(t *testing.T, master *redistest.Server) {
	t.Helper()
	if _, err := master.Do("ACL", "SETUSER", "default", "-sync", "-psync"); err != nil {
		t.Fatalf("ACL SETUSER on the master: %v", err)
	}
	if _, err := master.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica on the master: %v", err)
	}
}

// checkSentinelRun asserts what every failover run must show, whatever its
// figures: the failures are the fault's, and once recovered the decisions
// are exact again.
func checkSentinelRun(t *testing.T, sc sentinelScenario, run sentinelRun) {
	t.Helper()
	st := run.loadStats
	window := fmt.Sprintf("kill at %v, last failure ended at %v", st.sinceStart(st.FaultStart), st.sinceStart(st.LastFailEnd))
	// A call that was in flight at the kill may fail: it started at most
	// one timeout before.
	if st.FirstFailStart != 0 && st.FirstFailStart < st.FaultStart-int64(failoverTimeout) {
		t.Errorf("a call failed that started at %v, before the fault (%s): %v", st.sinceStart(st.FirstFailStart), window, st.Errors)
	}
	// Every failure ends within the failover, plus the breaker's cooldown
	// and a timeout (a replica-ack run also waits for the remaining
	// replica to resync): a generous bound, far below the run.
	if limit := sc.cut + run.healthy + defaultBreakerCooldown + 2*failoverTimeout + 5*time.Second; st.Recovery > limit {
		t.Errorf("recovery %v, longer than the failover (%v, healthy after %v) allows (%v): %s; errors %v\n%s", st.Recovery, run.failover, run.healthy, limit, window, st.Errors,
			st.slotTable(st.sinceStart(st.FaultStart)-time.Second, st.sinceStart(st.LastFailEnd)+time.Second))
	}
	// Exact again: once Redis has denied a call no call it admitted
	// started (the key cannot refill), and the final phase, after the last
	// failure and the first denial, has calls, every one denied by Redis.
	var finalCalls, finalAdmitted int64
	for i, sl := range st.Slots {
		if st.Start+int64(i)*int64(loadSlot) > max(st.LastFailEnd, st.FirstDenyEnd) {
			finalCalls += sl.Calls
			finalAdmitted += sl.Admitted
		}
	}
	if finalCalls == 0 || finalAdmitted != 0 {
		t.Errorf("final phase (the slots after the last failure and the first denial at %v; %s): %d calls, %d events admitted; want calls, none admitted",
			st.sinceStart(st.FirstDenyEnd), window, finalCalls, finalAdmitted)
	}
	if st.LastAdmitStart > st.FirstDenyEnd {
		t.Errorf("Redis admitted a call started at %v, after it had denied one (ended at %v): over-admission grew after recovery",
			st.sinceStart(st.LastAdmitStart), st.sinceStart(st.FirstDenyEnd))
	}
	if st.Failed == 0 {
		t.Errorf("no call failed across the failover: the kill did not reach the load (%s)", window)
	}
	if sc.failure == "closed" && st.FallbackAdmitted != 0 {
		t.Errorf("FailClosed admitted %d events by the failure policy", st.FallbackAdmitted)
	}
}

// recordSentinel records the runs of sc: one run, or several in the long
// version, whose figures are the worst run's (most over-admission, then
// longest recovery), with every run in the notes.
func recordSentinel(t *testing.T, sc sentinelScenario, limit int, runs []sentinelRun, notes ...string) {
	t.Helper()
	worst := slices.MaxFunc(runs, func(a, b sentinelRun) int {
		if c := a.Over() - b.Over(); c != 0 {
			return int(c)
		}
		return int(a.Recovery - b.Recovery)
	})
	spec := worst.Spec
	ack := "off"
	if sc.replicaAck > 0 {
		ack = fmt.Sprintf("WithReplicaAck(%d, %v)", sc.replicaAck, sc.ackTimeout)
	}
	failure := map[string]string{"closed": "FailClosed", "open": "FailOpen", "local": fmt.Sprintf("WithLocalFallback(%d)", failoverProcs)}[sc.failure]
	cut := ""
	if sc.cut > 0 {
		cut = fmt.Sprintf("the replication links are cut (on the master: ACL SETUSER default -sync -psync, CLIENT KILL TYPE replica) %v before ", sc.cut)
	}
	args := "none"
	if len(sc.dataArgs) > 0 {
		args = strings.Join(sc.dataArgs, " ")
	}
	r := worst.result(reliability.Result{
		Group:    "failover",
		Scenario: sc.id,
		Title:    sc.title,
		How: fmt.Sprintf("redis-server 7 master + %d replica(s) (--replicaof; server args: %s) and 3 redis-sentinel "+
			"(quorum 2, down-after-milliseconds %d, failover-timeout 2000, parallel-syncs 1) on 127.0.0.1; "+
			"%d processes x %d goroutines, each calling AllowN(key, 1) then sleeping %v, on redis.NewFailoverClient "+
			"(ContextTimeoutEnabled, other options default); one key, token bucket burst %d refilling 1 event/hour "+
			"(cannot refill during the run); limiter: %s, WithTimeout(%v), breaker default (%v), deny cache off, replica ack %s; "+
			"%sthe master is SIGKILLed once a third of the key is spent (read with Peek on the master), the run goes on "+
			"until %v after the key is spent on the new master (at most %v); %d run(s), figures of the worst",
			sc.replicas, args, redistest.SentinelDownAfter.Milliseconds(), failoverProcs, failoverGoroutines, spec.Pause,
			limit, failure, failoverTimeout, defaultBreakerCooldown, ack, cut, failoverFinal, spec.Duration, len(runs)),
	})
	if sc.failure == "local" {
		r.Notes = append(r.Notes, fmt.Sprintf("By design: during the failover each of the %d processes decides on its own "+
			"in-memory share of the limit (limit/%d, fresh), so the fallbacks together may admit up to the limit again, "+
			"whatever Redis had already admitted; WithLocalFallback trades that bound for availability. FailClosed admits nothing instead.",
			failoverProcs, failoverProcs))
	}
	for i, run := range runs {
		r.Notes = append(r.Notes, fmt.Sprintf("run %d: over %d, admitted %d, failed %d calls (fallback %d, admitted by fallback %d) of %d, "+
			"recovery %v, sentinels switched %v after the kill (healthy, final master with its replicas, after %v), p50/p99/max %v/%v/%v, killed with %d spent",
			i+1, run.Over(), run.Admitted, run.Failed, run.Fallback, run.FallbackAdmitted, run.Calls,
			run.Recovery.Round(time.Millisecond), run.failover.Round(time.Millisecond), run.healthy.Round(time.Millisecond), run.P50, run.P99, run.Max, run.killedAt))
	}
	if len(runs) > 1 {
		var overs, recs []string
		for _, run := range runs {
			overs = append(overs, fmt.Sprint(run.Over()))
			recs = append(recs, run.Recovery.Round(time.Millisecond).String())
		}
		r.Notes = append(r.Notes, "spread: over "+strings.Join(overs, ", ")+"; recovery "+strings.Join(recs, ", "))
	}
	r.Notes = append(r.Notes, notes...)
	reliability.Record(t, r)
}

// sentinelAckTimeout is the replica-ack scenarios' WAIT timeout: far
// above what a replica takes to acknowledge on a loaded machine (see
// clusterAckTimeout); an admission whose acknowledgement is late fails,
// and one that fails before the kill fails checkSentinelRun.
const sentinelAckTimeout = 500 * time.Millisecond

// sentinelLimit is the key's limit: about a second of the load's
// admissions after the failover (the load makes roughly 128 calls per
// 20 ms pause), more in the long version.
var sentinelLimit = reliability.Pick(6000, 20000)

func testSentinelFailover(t *testing.T, sc sentinelScenario, check func(*testing.T, sentinelRun)) {
	runs := make([]sentinelRun, reliability.Pick(1, 5))
	for i := range runs {
		runs[i] = runSentinelFailover(t, sc, sentinelLimit)
		checkSentinelRun(t, sc, runs[i])
		if check != nil {
			check(t, runs[i])
		}
	}
	recordSentinel(t, sc, sentinelLimit, runs)
}

// TestProofSentinelFailoverKill: plain asynchronous replication, FailClosed.
// The figure of interest is the over-admission (writes the replica never
// got); it is recorded, not bounded: it depends on the replication lag at
// the kill.
func TestProofSentinelFailoverKill(t *testing.T) {
	testSentinelFailover(t, sentinelScenario{
		id:       "sentinel-kill",
		title:    "Sentinel: master SIGKILLed under load, FailClosed",
		replicas: 1,
		failure:  "closed",
	}, nil)
}

// TestProofSentinelFailoverLocalFallback: as TestProofSentinelFailoverKill
// with WithLocalFallback(4): the fallback decides during the failover.
func TestProofSentinelFailoverLocalFallback(t *testing.T) {
	testSentinelFailover(t, sentinelScenario{
		id:       "sentinel-kill-local-fallback",
		title:    "Sentinel: master SIGKILLed under load, WithLocalFallback(4)",
		replicas: 1,
		failure:  "local",
	}, func(t *testing.T, run sentinelRun) {
		if run.FallbackAdmitted == 0 {
			t.Errorf("the local fallback admitted nothing during the failover (%d fallback calls)", run.Fallback)
		}
		// Each process's fallback holds a quarter of the limit (rounded
		// down), fresh: they cannot admit more than the limit together.
		if run.FallbackAdmitted > int64(sentinelLimit) {
			t.Errorf("the fallbacks admitted %d events, more than the 4 shares of %d", run.FallbackAdmitted, sentinelLimit/failoverProcs)
		}
	})
}

// TestProofSentinelFailoverReplicaAck: every data node runs with
// min-replicas-to-write 1, and the limiter with WithReplicaAck(1, ...):
// an admission is returned only once a replica has it, so the replica
// promoted by the failover has every admission callers saw, and nothing is
// admitted beyond the limit. Two replicas, so that the new master still has
// one to acknowledge its writes after the failover.
func TestProofSentinelFailoverReplicaAck(t *testing.T) {
	testSentinelFailover(t, sentinelScenario{
		id:         "sentinel-kill-replica-ack",
		title:      "Sentinel: master SIGKILLed under load, FailClosed, min-replicas-to-write 1 and WithReplicaAck(1)",
		replicas:   2,
		dataArgs:   []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "5"},
		failure:    "closed",
		replicaAck: 1,
		ackTimeout: sentinelAckTimeout,
	}, func(t *testing.T, run sentinelRun) {
		if run.Over() != 0 {
			t.Errorf("admitted %d events beyond the limit %d with WithReplicaAck(1): acknowledged writes were lost", run.Over(), sentinelLimit)
		}
	})
}

// TestProofSentinelFailoverLaggingReplica: the replication link is cut
// 200ms before the master is killed, so the master admits for 200ms what
// the replica never gets: the loss asynchronous replication allows, made
// deterministic. Recorded, and
// asserted to be there (else TestProofSentinelFailoverReplicaAckLagging,
// which must show none, would prove nothing).
func TestProofSentinelFailoverLaggingReplica(t *testing.T) {
	testSentinelFailover(t, sentinelScenario{
		id:       "sentinel-kill-lagging-replica",
		title:    "Sentinel: replication cut 200ms, then master SIGKILLed, FailClosed",
		replicas: 1,
		failure:  "closed",
		cut:      200 * time.Millisecond,
	}, func(t *testing.T, run sentinelRun) {
		if run.Over() == 0 {
			t.Errorf("no over-admission although the replica missed 200ms of writes: the scenario does not reproduce the loss")
		}
	})
}

// TestProofSentinelFailoverReplicaAckLagging: as
// TestProofSentinelFailoverLaggingReplica (both links cut) with
// min-replicas-to-write 1 and WithReplicaAck(1): the admissions the
// replicas did not acknowledge are not returned, so none is lost.
func TestProofSentinelFailoverReplicaAckLagging(t *testing.T) {
	testSentinelFailover(t, sentinelScenario{
		id:         "sentinel-kill-lagging-replica-ack",
		title:      "Sentinel: replication cut 200ms, then master SIGKILLed, FailClosed, min-replicas-to-write 1 and WithReplicaAck(1)",
		replicas:   2,
		dataArgs:   []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "5"},
		failure:    "closed",
		replicaAck: 1,
		ackTimeout: sentinelAckTimeout,
		cut:        200 * time.Millisecond,
	}, func(t *testing.T, run sentinelRun) {
		if run.Over() != 0 {
			t.Errorf("admitted %d events beyond the limit %d with WithReplicaAck(1): acknowledged writes were lost", run.Over(), sentinelLimit)
		}
	})
}
