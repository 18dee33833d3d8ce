package lincheck

import (
	"sync"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// Kind is the kind of an operation.
type Kind uint8

// The kinds of operations.
const (
	// AllowN is a call of AllowN(key, n).
	AllowN Kind = iota
	// Peek is a call of Peek(key, n): the Decision AllowN would return,
	// consuming nothing.
	Peek
)

// String returns "AllowN" or "Peek".
func (k Kind) String() string {
	if k == Peek {
		return "Peek"
	}
	return "AllowN"
}

// Input is what an operation asked: Kind(Key, N) at the limiter time T
// (Unix nanoseconds of the manual clock the limiter read).
type Input struct {
	Key  string `json:"key"`
	N    int    `json:"n"`
	T    int64  `json:"t"`
	Kind Kind   `json:"kind"`
}

// Output is what an operation returned: the Decision and the error's
// message ("" for none).
type Output struct {
	Decision ratelimit.Decision `json:"decision"`
	Err      string             `json:"err,omitempty"`
}

// Op is one recorded operation: its client (a goroutine of some process,
// numbered from 0 across processes), input, output, and call and return
// times in Unix nanoseconds ([Now]). It is porcupine.Operation in a form
// that survives JSON, for histories recorded by other processes.
type Op struct {
	Client int    `json:"client"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

// clock anchors Now: the wall clock read once, plus the monotonic time
// since (timesrc's, which takes a reading whose two parts agree).
var clock = timesrc.New(nil)

// Now returns the time stamps of operations: Unix nanoseconds from the
// wall clock read when the process started plus the monotonic time since.
// It never runs backwards within a process, and processes started on one
// machine share it (up to a step of the wall clock between their starts).
func Now() int64 { return clock.Now() }

// Recorder records operations. Safe for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	ops []Op // guarded by mu
}

// Do records f as one operation of client with input in: the time before
// the call and after it returns, and what it returned, which Do returns.
func (r *Recorder) Do(client int, in Input, f func() (ratelimit.Decision, error)) (ratelimit.Decision, error) {
	call := Now()
	d, err := f()
	ret := Now()
	out := Output{Decision: d}
	if err != nil {
		out.Err = err.Error()
		if out.Err == "" {
			out.Err = "error"
		}
	}
	r.Add(Op{Client: client, Input: in, Output: out, Call: call, Return: ret})
	return d, err
}

// Add records ops recorded elsewhere (another process).
func (r *Recorder) Add(ops ...Op) {
	r.mu.Lock()
	r.ops = append(r.ops, ops...)
	r.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Operations returns ops as porcupine operations.
func Operations(ops []Op) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		in := call{in: op.Input}
		out[i] = porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Call, Output: op.Output, Return: op.Return}
	}
	return out
}
