package fault

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is an in-process TCP proxy between one daemon and Redis. It can
// cut every connection at once, drop everything for a while (a
// partition), and delay what Redis answers, so replies arrive after the
// client's read timeout while Redis has executed the command. Requests
// are never delayed. Armed (arm), it also cuts a connection in the middle
// of a request batch: after forwarding a chunk of requests and Redis's
// reply to it, which it drops (Redis ran the commands; the client reads
// EOF, and go-redis sends the whole batch again), or before forwarding it
// (Redis ran nothing).
type proxy struct {
	target string
	ln     net.Listener
	delay  atomic.Int64           // reply delay in ns
	share  atomic.Uint64          // math.Float64bits of the share of reply chunks delayed
	cuts   atomic.Int64           // connections cut so far
	drop   atomic.Bool            // partitioned: everything is dropped
	marker atomic.Pointer[[]byte] // delay the reply to requests containing it

	armed               atomic.Bool
	after, before       atomic.Uint64 // math.Float64bits of the share of request chunks cut
	cutAfter, cutBefore atomic.Int64  // cuts after Redis replied to the chunk, and before forwarding it

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
	dead           chan struct{}
	marked         atomic.Int64 // replies still to delay for marked requests
	muted          atomic.Bool  // replies are read and dropped, each signalled on replied
	replied        chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.dead)
		l.client.Close()
		l.server.Close()
	})
}

// newProxy listens on 127.0.0.1:0 and forwards to target; it is closed in
// t's cleanup.
func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the address to give the daemon as redis.addrs.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// setDelay delays a share (0 to 1) of the reply chunks read from Redis
// from now on by d; 0, 0 turns it off. Chunks already queued keep their
// delay, and a delayed chunk holds up those behind it on its connection,
// as on a real link.
func (p *proxy) setDelay(d time.Duration, share float64) {
	p.share.Store(math.Float64bits(share))
	p.delay.Store(int64(d))
}

// delayRepliesTo delays by d the reply to every request that contains
// marker (nil: none), whatever setDelay says. Clients that wait for each
// reply before sending on (go-redis, but for pipelines) get exactly that
// reply late.
func (p *proxy) delayRepliesTo(marker []byte, d time.Duration) {
	p.delay.Store(int64(d))
	if marker == nil {
		p.marker.Store(nil)
		return
	}
	p.marker.Store(&marker)
}

// arm cuts a share after of the request chunks after forwarding them
// (and dropping the reply) and a share before of them before forwarding.
func (p *proxy) arm(after, before float64) {
	p.after.Store(math.Float64bits(after))
	p.before.Store(math.Float64bits(before))
	p.armed.Store(true)
}

func (p *proxy) disarm() { p.armed.Store(false) }

// cutAll closes every open connection in both directions, dropping what
// is queued, as a reset or a dead middlebox would. It returns how many.
func (p *proxy) cutAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.cuts.Add(int64(len(links)))
	return len(links)
}

// partition cuts every connection and drops everything sent either way
// until heal, which cuts again: connections that lived through the
// partition have lost bytes mid-stream, as they would have on a real
// link, and are reset.
func (p *proxy) partition() {
	p.drop.Store(true)
	p.cutAll()
}

func (p *proxy) heal() {
	p.drop.Store(false)
	p.cutAll()
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s, dead: make(chan struct{}), replied: make(chan struct{}, 1)}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(l, s, c, false) // requests
		go p.pump(l, c, s, true)  // replies
	}
}

// chunk is what one read got, to be written at at.
type chunk struct {
	b  []byte
	at time.Time
}

// cutMidBatch cuts l around the request chunk b, as arm says, and reports
// whether it did: after queueing b for Redis and waiting (up to a second)
// for Redis's reply, which the reply pump drops, or before forwarding it.
func (p *proxy) cutMidBatch(l *link, q chan<- chunk, b []byte) bool {
	r := rand.Float64()
	after, before := math.Float64frombits(p.after.Load()), math.Float64frombits(p.before.Load())
	switch {
	case r < after:
		l.muted.Store(true)
		select {
		case q <- chunk{b: append([]byte(nil), b...), at: time.Now()}:
		case <-l.dead:
			return true
		}
		select {
		case <-l.replied:
			p.cutAfter.Add(1)
		case <-time.After(time.Second):
		}
	case r < after+before:
		p.cutBefore.Add(1)
	default:
		return false
	}
	l.close()
	return true
}

// pump copies src to dst; with delayed, each chunk is written delay after
// it was read. When either side ends, the whole link is closed.
func (p *proxy) pump(l *link, dst, src net.Conn, delayed bool) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	q := make(chan chunk, 256)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for ch := range q {
			if d := time.Until(ch.at); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-l.dead:
					t.Stop()
					return
				}
			}
			if _, err := dst.Write(ch.b); err != nil {
				l.close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		switch {
		case n == 0 || p.drop.Load():
		case delayed && l.muted.Load(): // a cut after this reply is pending
			select {
			case l.replied <- struct{}{}:
			default:
			}
		case !delayed && p.armed.Load() && p.cutMidBatch(l, q, buf[:n]):
			err = net.ErrClosed
		default:
			ch := chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
			switch {
			case !delayed:
				if m := p.marker.Load(); m != nil && bytes.Contains(ch.b, *m) {
					l.marked.Add(1)
				}
			case l.marked.Load() > 0:
				l.marked.Add(-1)
				ch.at = ch.at.Add(time.Duration(p.delay.Load()))
			case rand.Float64() < math.Float64frombits(p.share.Load()):
				ch.at = ch.at.Add(time.Duration(p.delay.Load()))
			}
			select {
			case q <- ch:
			case <-l.dead:
			}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-written
}
