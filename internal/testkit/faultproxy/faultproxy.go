// Package faultproxy is a loopback TCP proxy that injects network faults
// between a client and a server, for tests: added latency, a bandwidth
// limit, a black hole, a connection reset after the server has answered
// (the reply is lost after the request was executed) and a reset in the
// middle of a reply. Faults apply per direction and may change while
// connections are open; the next chunk read sees the change.
//
// It is one stdlib file rather than github.com/Shopify/toxiproxy/v2 used as
// a library: no extra dependency for the tests of every module, exactly the
// faults the tests need (toxiproxy has no "reset once the reply arrives"),
// and fully deterministic control from the test goroutine (a fault is a
// method call that takes effect on the next chunk, counted per request,
// with no HTTP API, no toxicity probabilities and no background server).
//
// A chunk is what one Read returned: for a request/response protocol such
// as RESP on loopback, one request or one pipeline per chunk and one reply
// per chunk, though nothing guarantees it.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is one direction of every proxied connection.
type Direction int

const (
	// Up is the client-to-server direction (requests).
	Up Direction = iota
	// Down is the server-to-client direction (replies).
	Down
)

// String returns "up" or "down".
func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// End is how a fault ends a connection.
type End int32

const (
	// RST resets the connection (SO_LINGER 0): the client reads
	// ECONNRESET.
	RST End = iota
	// FIN closes the connection: the client reads EOF (or an unexpected
	// EOF in the middle of a reply).
	FIN
)

// Faults are the faults applied to one direction of every connection.
// The zero value forwards everything at once.
type Faults struct {
	// Latency is waited before forwarding each chunk. Chunks of one
	// connection stay in order, so a connection carries one chunk per
	// Latency at most.
	Latency time.Duration
	// BytesPerSecond limits how fast each connection forwards in this
	// direction; 0 means no limit.
	BytesPerSecond int
	// BlackHole reads and discards everything: nothing is forwarded and
	// the connection stays open.
	BlackHole bool
}

// Stats counts what the proxy did since [New].
type Stats struct {
	Accepted int64    // connections accepted
	Open     int      // connections open now
	Bytes    [2]int64 // bytes forwarded, indexed by Direction
	Chunks   [2]int64 // chunks read, indexed by Direction
	Dropped  int64    // replies dropped by DropReplies (connections ended)
	Cut      int64    // replies cut by CutReplies (connections ended)
	// Matched counts the occurrences of the MatchRequests substring in
	// the request bytes forwarded to the server (also across chunks),
	// counted as each chunk starts to be written.
	Matched int64
}

// Proxy forwards every connection accepted on its address to the target.
// Its methods are safe for concurrent use. Create one with [New], stop it
// with [Proxy.Close].
type Proxy struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	faults [2]atomic.Pointer[Faults]

	dropEvery atomic.Int64           // DropReplies: every n-th request, 0 off
	dropEnd   atomic.Int32           // DropReplies: how the connection ends
	match     atomic.Pointer[[]byte] // MatchRequests: what DropReplies counts, nil all
	requests  atomic.Int64           // requests counted for dropEvery
	cutEvery  atomic.Int64           // CutReplies: every n-th reply, 0 off
	cutKeep   atomic.Int64           // bytes of a cut reply forwarded
	cutEnd    atomic.Int32           // CutReplies: how the connection ends
	replies   atomic.Int64           // replies counted for cutEvery

	accepted, dropped, cut atomic.Int64
	matched                atomic.Int64
	bytes, chunks          [2]atomic.Int64

	mu     sync.Mutex
	links  map[*link]struct{} // guarded by mu
	closed bool               // guarded by mu
}

// link is one proxied connection: the client's and the server's side.
type link struct {
	client, server net.Conn
	dropArmed      atomic.Bool   // the next reply chunk resets the connection
	tail           []byte        // the end of the last request chunk, for Stats.Matched (up pump only)
	done           chan struct{} // closed by close
	once           sync.Once
}

// New starts a proxy listening on 127.0.0.1 (a free port) that forwards
// to target, a host:port dialed for each accepted connection.
func New(target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("faultproxy: empty target")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{}), links: map[*link]struct{}{}}
	for d := range p.faults {
		p.faults[d].Store(&Faults{})
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, 127.0.0.1:port: give it to the client
// in place of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set sets the faults of direction d, for every connection, from the next
// chunk on.
func (p *Proxy) Set(d Direction, f Faults) {
	p.faults[d].Store(&f)
}

// Clear removes every fault: both directions' [Faults], [Proxy.DropReplies]
// (and its [Proxy.MatchRequests]) and [Proxy.CutReplies].
func (p *Proxy) Clear() {
	p.Set(Up, Faults{})
	p.Set(Down, Faults{})
	p.DropReplies(0, RST)
	p.MatchRequests("")
	p.CutReplies(0, 0, RST)
}

// DropReplies makes every n-th request chunk (counted over all
// connections from this call on) lose its reply: the request is forwarded,
// and when the server's reply starts to arrive the connection is ended as
// end says instead of forwarding it. The server has then executed the
// request, and the client sees the connection end without a reply. n <= 0
// stops it.
func (p *Proxy) DropReplies(n int, end End) {
	p.requests.Store(0)
	p.dropEnd.Store(int32(end))
	p.dropEvery.Store(int64(max(n, 0)))
}

// MatchRequests makes [Proxy.DropReplies] see only the request chunks
// that contain substr (such as "evalsha", so that the connection set-up a
// client sends after a reset is not dropped too); "" (the default) makes it
// see every request.
func (p *Proxy) MatchRequests(substr string) {
	if substr == "" {
		p.match.Store(nil)
		return
	}
	b := []byte(substr)
	p.match.Store(&b)
}

// CutReplies makes every n-th reply chunk (counted over all connections
// from this call on) end the connection in its middle: its first keep
// bytes (at most all but one) are forwarded, then the connection is ended
// as end says. n <= 0 stops it.
func (p *Proxy) CutReplies(n, keep int, end End) {
	p.replies.Store(0)
	p.cutKeep.Store(int64(max(keep, 0)))
	p.cutEnd.Store(int32(end))
	p.cutEvery.Store(int64(max(n, 0)))
}

// ResetAll resets every open connection now (RST to the client).
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	ls := p.openLinks()
	p.mu.Unlock()
	for _, l := range ls {
		l.close(true)
	}
}

// openLinks returns the open connections; p.mu is held.
func (p *Proxy) openLinks() []*link {
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	return ls
}

// Stats returns the proxy's counts.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.links)
	p.mu.Unlock()
	s := Stats{Accepted: p.accepted.Load(), Open: open, Dropped: p.dropped.Load(), Cut: p.cut.Load(), Matched: p.matched.Load()}
	for d := range s.Bytes {
		s.Bytes[d] = p.bytes[d].Load()
		s.Chunks[d] = p.chunks[d].Load()
	}
	return s
}

// Close stops the proxy: it closes the listener and every connection, and
// returns once every goroutine of the proxy has exited. It may be called
// more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	close(p.done)
	ls := p.openLinks()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range ls {
		l.close(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed (Accept on loopback fails for nothing else worth retrying in tests)
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client c and runs the two pumps.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	s, err := d.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.pump(l, Down)
	}()
	p.pump(l, Up)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// close closes both sides of l once; with reset the client gets an RST.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		if reset {
			if tc, ok := l.client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
		l.client.Close()
		l.server.Close()
	})
}

// pump forwards direction d of l until either side closes, applying the
// faults; it closes l when it stops, so the other pump stops too.
func (p *Proxy) pump(l *link, d Direction) {
	src, dst := l.client, l.server
	if d == Down {
		src, dst = l.server, l.client
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.chunks[d].Add(1)
			if ok, end := p.forward(l, d, buf[:n], dst); !ok {
				l.close(end == RST)
				return
			}
		}
		if err != nil {
			l.close(!errors.Is(err, io.EOF))
			return
		}
	}
}

// forward applies d's faults to chunk b and writes what gets through to
// dst; when the connection must end it returns false and how.
func (p *Proxy) forward(l *link, d Direction, b []byte, dst net.Conn) (bool, End) {
	f := p.faults[d].Load()
	if f.BlackHole {
		return true, RST
	}
	if d == Down {
		if l.dropArmed.Swap(false) {
			p.dropped.Add(1)
			return false, End(p.dropEnd.Load())
		}
		if every := p.cutEvery.Load(); every > 0 && p.replies.Add(1)%every == 0 {
			keep := min(int(p.cutKeep.Load()), len(b)-1)
			if keep > 0 {
				p.write(l, d, dst, b[:keep], f.BytesPerSecond)
			}
			p.cut.Add(1)
			return false, End(p.cutEnd.Load())
		}
	}
	if f.Latency > 0 && !p.sleep(l, f.Latency) {
		return false, RST
	}
	if d == Up {
		// Armed and counted before the request is written: its reply may
		// come back before Write returns, and the server may act on it
		// before this goroutine runs again.
		if every := p.dropEvery.Load(); every > 0 && p.matches(b) && p.requests.Add(1)%every == 0 {
			l.dropArmed.Store(true)
		}
		p.count(l, b)
	}
	return p.write(l, d, dst, b, f.BytesPerSecond), RST
}

// count counts the MatchRequests substring in b, forwarded upstream on l,
// with the end of l's previous chunk in front (an occurrence split
// between two chunks counts once).
func (p *Proxy) count(l *link, b []byte) {
	m := p.match.Load()
	if m == nil || len(*m) == 0 {
		l.tail = l.tail[:0]
		return
	}
	data := append(l.tail, b...)
	p.matched.Add(int64(bytes.Count(data, *m)))
	keep := min(len(*m)-1, len(data)) // too short to hold a whole occurrence
	l.tail = append(l.tail[:0], data[len(data)-keep:]...)
}

// matches reports whether request chunk b counts for DropReplies.
func (p *Proxy) matches(b []byte) bool {
	m := p.match.Load()
	return m == nil || bytes.Contains(b, *m)
}

// write writes b to dst, paced to bps bytes per second when bps > 0; it
// reports whether all of b was written.
func (p *Proxy) write(l *link, d Direction, dst net.Conn, b []byte, bps int) bool {
	if bps <= 0 {
		n, err := dst.Write(b)
		p.bytes[d].Add(int64(n))
		return err == nil
	}
	// Pieces of a tenth of a second's worth (at least one byte), each
	// written once its share of the second has passed.
	piece := max(bps/10, 1)
	written := 0
	for written < len(b) {
		k := min(piece, len(b)-written)
		if !p.sleep(l, time.Duration(k)*time.Second/time.Duration(bps)) {
			return false
		}
		n, err := dst.Write(b[written : written+k])
		p.bytes[d].Add(int64(n))
		written += n
		if err != nil {
			return false
		}
	}
	return true
}

// sleep waits d, or less when l or the proxy closes (then it returns
// false).
func (p *Proxy) sleep(l *link, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.done:
		return false
	case <-l.done:
		return false
	}
}
