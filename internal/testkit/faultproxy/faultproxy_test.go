package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echo is a line echo server that counts the lines it answered.
type echo struct {
	ln    net.Listener
	lines atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					e.lines.Add(1)
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip writes line and reads the answer, within a deadline.
func roundTrip(c net.Conn, r *bufio.Reader, line string, within time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(within))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	s, err := r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func TestForwards(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	for _, msg := range []string{"a", "hello", strings.Repeat("x", 100000)} {
		got, err := roundTrip(c, r, msg, 5*time.Second)
		if err != nil || got != msg {
			t.Fatalf("roundTrip(%d bytes) = %d bytes, %v; want the same back", len(msg), len(got), err)
		}
	}
	s := p.Stats()
	if s.Accepted != 1 || s.Open != 1 || s.Bytes[Up] != 100009 || s.Bytes[Down] != 100009 {
		t.Fatalf("Stats = %+v, want 1 accepted, 1 open, 100009 bytes each way", s)
	}
}

func TestLatency(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	// The added latency is large enough that a round trip without it is
	// not mistaken for one with it on a loaded machine: with 80 ms, a
	// scheduling stall of that size (233 ms was measured while the whole
	// suite ran with both CPUs busy) would fail the check after Clear.
	const up, down = 500 * time.Millisecond, 300 * time.Millisecond
	p.Set(Up, Faults{Latency: up})
	p.Set(Down, Faults{Latency: down})
	start := time.Now()
	if _, err := roundTrip(c, r, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < up+down {
		t.Fatalf("round trip took %v, want at least %v of added latency", el, up+down)
	}
	p.Clear() // faults change while the connection is open
	start = time.Now()
	if _, err := roundTrip(c, r, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= up+down {
		t.Fatalf("round trip after Clear took %v, want less than the %v it took with the latency", el, up+down)
	}
}

func TestBandwidth(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	p.Set(Down, Faults{BytesPerSecond: 10000})
	msg := strings.Repeat("y", 2999) // 3000 bytes with the newline: 0.3 s at 10 kB/s
	start := time.Now()
	got, err := roundTrip(c, r, msg, 5*time.Second)
	if err != nil || got != msg {
		t.Fatalf("roundTrip = %d bytes, %v", len(got), err)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("3000 bytes at 10000 B/s took %v, want at least 250ms", el)
	}
}

func TestDropRepliesAfterExecution(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	p.DropReplies(1, RST)
	_, err := roundTrip(c, r, "once", 5*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("roundTrip with the reply dropped: err = %v, want connection reset", err)
	}
	if got := e.lines.Load(); got != 1 {
		t.Fatalf("server answered %d lines, want 1: the request must reach it", got)
	}
	if s := p.Stats(); s.Dropped != 1 {
		t.Fatalf("Stats().Dropped = %d, want 1", s.Dropped)
	}
	// Every second request: the first passes.
	p.DropReplies(2, FIN)
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("first request with DropReplies(2, FIN) = %q, %v; want it answered", got, err)
	}
	if _, err := roundTrip(c2, r2, "two", 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("second request with DropReplies(2, FIN): err = %v, want EOF", err)
	}
	if got := e.lines.Load(); got != 3 {
		t.Fatalf("server answered %d lines, want 3", got)
	}
	// Only the requests that match count.
	p.DropReplies(1, RST)
	p.MatchRequests("drop")
	c3, r3 := dial(t, p)
	if got, err := roundTrip(c3, r3, "keep", 5*time.Second); err != nil || got != "keep" {
		t.Fatalf("unmatched request = %q, %v; want it answered", got, err)
	}
	if _, err := roundTrip(c3, r3, "drop me", 5*time.Second); err == nil {
		t.Fatal("matched request answered, want a reset")
	}
	if s := p.Stats(); s.Matched != 1 {
		t.Fatalf("Stats().Matched = %d, want 1", s.Matched)
	}
}

func TestCutRepliesMidReply(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	p.CutReplies(1, 3, RST)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("abcdefgh\n")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if string(got) != "abc" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("cut reply = %q, %v; want \"abc\" then connection reset", got, err)
	}
	if s := p.Stats(); s.Cut != 1 {
		t.Fatalf("Stats().Cut = %d, want 1", s.Cut)
	}
}

func TestBlackHole(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	p.Set(Up, Faults{BlackHole: true})
	c, r := dial(t, p) // new connections are still accepted
	_, err := roundTrip(c, r, "lost", 200*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("roundTrip into a black hole: err = %v, want a timeout", err)
	}
	if got := e.lines.Load(); got != 0 {
		t.Fatalf("server saw %d lines, want 0", got)
	}
	if s := p.Stats(); s.Bytes[Up] != 0 || s.Chunks[Up] != 1 {
		t.Fatalf("Stats = %+v, want the chunk read and nothing forwarded", s)
	}
}

func TestResetAll(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.ResetAll()
	if _, err := roundTrip(c, r, "y", 5*time.Second); err == nil {
		t.Fatal("roundTrip after ResetAll succeeded, want an error")
	}
}

// TestCloseLeavesNothing closes a proxy with connections blocked in every
// fault and checks that every goroutine is gone and clients see the end.
func TestCloseLeavesNothing(t *testing.T) {
	e := startEcho(t)
	before := runtime.NumGoroutine()
	p, err := New(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p.Set(Up, Faults{Latency: time.Hour})
	p.Set(Down, Faults{BytesPerSecond: 1})
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("stuck\n"))
		conns = append(conns, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Open < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a client read data after Close, want the connection closed")
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("dial after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	for time.Now().Before(deadline) && runtime.NumGoroutine() > before {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before New", n, before)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(""); err == nil || !strings.HasPrefix(err.Error(), "faultproxy: ") {
		t.Fatalf("New(\"\") = %v, want a faultproxy error", err)
	}
}
