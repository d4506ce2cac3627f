package main

import (
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The status server's bounds. An audit held 1,009 idle keep-alive
// connections open against a daemon without them: it ran out of file
// descriptors, its Redis dials failed and two items were quarantined. A
// scraper and a probe or two need a handful of connections; the rest are
// refused at once, so a flood costs the daemon at most maxConns
// descriptors and a client learns at once instead of hanging.
//
// One source may hold at most maxConnsPerSource of them: an attacker's
// trial opened maxConns connections from one address and trickled
// bytes into them, and 22 of 30 /healthz probes from elsewhere were
// refused. Each such connection still costs its source a slot for
// readHeaderTimeout (the whole header must arrive by then, however it
// trickles) or, idle between requests, idleTimeout. A reverse proxy is
// one source: the clients behind it share its maxConnsPerSource.
//
// maxConns is 256, not 64: at 64, four sources of 16 each (four pods, or
// one local user's 127.0.0.3-6) made 98 of 99 probes fail in an outside
// trial; it now takes sixteen, and 256 descriptors leave most of a
// 1024-descriptor limit to Redis and the sinks.
const (
	maxConns          = 256
	maxConnsPerSource = 16
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 16 << 10
)

// statusServer returns the server for h with the bounds above, guarded
// by hostGuard with allowed, and ln capped to serve it on
// (srv.Serve(capped)): the one server of run and ui.
func statusServer(ln net.Listener, allowed []string, h http.Handler, log zerolog.Logger) (srv *http.Server, capped net.Listener) {
	if len(allowed) == 0 && !onLoopback(ln) {
		log.Warn().Str("addr", ln.Addr().String()).Msg("listening beyond loopback with http.allowed_hosts empty: " +
			"requests naming any host are served, so a web page whose name is rebound to this address (DNS rebinding) " +
			"can read the API through a browser; list the names syncd is reached by in http.allowed_hosts")
	}
	srv = &http.Server{Handler: hostGuard(ln, allowed, h), ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes, ErrorLog: stdLogger(log)}
	return srv, capConns(ln, maxConns, maxConnsPerSource, log.With().Str("component", "http").Logger())
}

// refusedMetric registers syncd_http_connections_refused_total for ln
// (a capListener from statusServer) on reg.
func refusedMetric(reg prometheus.Registerer, ln net.Listener) {
	l, ok := ln.(*capListener)
	if !ok {
		return
	}
	for cap, name := range []string{capTotal: "total", capSource: "per_source"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "syncd_http_connections_refused_total",
			Help:        "Connections to the status server closed at once, over its cap in all (cap=\"total\") or for one source (cap=\"per_source\").",
			ConstLabels: prometheus.Labels{"cap": name}}, func() float64 { return float64(l.Refused(cap)) }))
	}
}

// capListener accepts at most max connections at once, and at most
// perSource from one source (sourceOf); one over either cap is closed as
// soon as it is accepted, counted (Refused) and logged: per cap, at most
// one line per refusalLogEvery, saying how many since the last and the
// last source; refusals held back are logged when the interval ends,
// whether more come or not.
type capListener struct {
	net.Listener
	max, perSource int
	log            zerolog.Logger
	refused        [2]atomic.Int64 // by capTotal, capSource

	mu       sync.Mutex
	open     int
	bySource map[netip.Prefix]int
	logEvery time.Duration
	pending  [2]refusals // by cap
	closed   bool
}

// refusals are one cap's refusals since its last line.
type refusals struct {
	n       int
	last    net.Addr    // the last refused source
	nextLog time.Time   // when the next line may be written
	flush   *time.Timer // writes the held-back line at nextLog
}

// The caps a connection can be refused by.
const (
	capTotal  = 0 // max connections in all
	capSource = 1 // perSource from one source
)

// refusalLogEvery spaces the lines that log refused connections: a flood
// is thousands a second, and each line would cost what the cap saves.
const refusalLogEvery = time.Minute

// capConns caps ln at max connections at once, perSource from one
// source, logging refusals to log.
func capConns(ln net.Listener, max, perSource int, log zerolog.Logger) *capListener {
	return &capListener{Listener: ln, max: max, perSource: perSource, log: log, logEvery: refusalLogEvery,
		bySource: make(map[netip.Prefix]int)}
}

// Refused is how many connections the cap (capTotal, capSource) refused.
func (l *capListener) Refused(cap int) int64 { return l.refused[cap].Load() }

// sourceOf is the source a connection from addr counts against: its
// IPv4 address, or its IPv6 /64, since one host commonly holds a whole
// /64 and would otherwise get a fresh share per address. Loopback
// addresses count like any other; every non-IP address is one source.
func sourceOf(addr net.Addr) netip.Prefix {
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c.RemoteAddr())
		l.mu.Lock()
		cap := -1
		switch {
		case l.open >= l.max:
			cap = capTotal
		case l.bySource[src] >= l.perSource:
			cap = capSource
		default:
			l.open++
			l.bySource[src]++
		}
		var line refusals
		if cap >= 0 {
			p := &l.pending[cap]
			p.n++
			p.last = c.RemoteAddr()
			if now := time.Now(); !now.Before(p.nextLog) {
				line = *p
				p.n, p.nextLog = 0, now.Add(l.logEvery)
			} else if p.flush == nil && !l.closed {
				p.flush = time.AfterFunc(p.nextLog.Sub(now), func() { l.flush(cap) })
			}
		}
		l.mu.Unlock()
		if cap < 0 {
			return &cappedConn{Conn: c, l: l, src: src}, nil
		}
		l.refused[cap].Add(1)
		c.Close()
		if line.n > 0 {
			l.logRefusals(cap, line)
		}
	}
}

// flush writes cap's held-back line, when its interval has ended.
func (l *capListener) flush(cap int) {
	l.mu.Lock()
	p := &l.pending[cap]
	line := *p
	p.flush = nil
	if line.n > 0 {
		p.n, p.nextLog = 0, time.Now().Add(l.logEvery)
	}
	l.mu.Unlock()
	if line.n > 0 {
		l.logRefusals(cap, line)
	}
}

// Close closes the listener and drops the lines held back.
func (l *capListener) Close() error {
	l.mu.Lock()
	l.closed = true
	for i := range l.pending {
		if t := l.pending[i].flush; t != nil {
			t.Stop()
		}
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// logRefusals logs the connections cap refused since its last line.
func (l *capListener) logRefusals(cap int, r refusals) {
	why, name := fmt.Sprintf("the server held its most connections (%d) at once", l.max), "total"
	if cap == capSource {
		why, name = fmt.Sprintf("their source held its most connections (%d) at once", l.perSource), "per_source"
	}
	l.log.Warn().Str("cap", name).Int("refused", r.n).Str("last_source", r.last.String()).Int64("every_s", int64(l.logEvery/time.Second)).
		Msg("http connections refused at once: " + why + "; refused counts those since this cap's last such line: " +
			"a flood, or clients that hold idle connections open")
}

type cappedConn struct {
	net.Conn
	l    *capListener
	src  netip.Prefix
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if c.l.bySource[c.src]--; c.l.bySource[c.src] == 0 {
			delete(c.l.bySource, c.src)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// stdLogger routes net/http's own messages (accept errors, TLS
// handshakes) to the daemon's log instead of the standard logger.
func stdLogger(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(log.With().Str("component", "http").Logger(), "", 0)
}

// hostGuard guards the server against DNS rebinding: a web page whose
// name an attacker points at the server's address could otherwise read
// the API and the page through a browser that reaches that address (an
// attacker's trial did, with chromium, on 127.0.0.1). Such a request
// names the attacker's host, and gets 421 Misdirected Request.
//
// A request is served when its Host, the port not compared, is
//   - in allowed (http.allowed_hosts as config.File.AllowedHosts gives
//     it): a name, an IP address, or "*." and a domain for every name
//     below it;
//   - any IP address, or none (HTTP/1.0 without Host, as HAProxy's
//     health check sends): a browser sends an IP address as Host only
//     for a page loaded from that address, which no DNS answer can
//     rebind, and always sends a Host; probes and scrapers (/healthz,
//     /readyz, /metrics) often name the server by an address, which may
//     not be the one the connection came in on (a NAT, a port-forward,
//     a Kubernetes Service IP: an outside trial got 421 through each);
//   - localhost or a name under .localhost, on a connection that came
//     in over loopback: browsers resolve these to loopback themselves.
//
// With allowed empty, a server on a loopback address is guarded all the
// same (so localhost and IP addresses only), and one on another
// address is left as it is: it is reached by whatever names its network
// gives it, which only allowed can say.
func hostGuard(ln net.Listener, allowed []string, h http.Handler) http.Handler {
	if len(allowed) == 0 && !onLoopback(ln) {
		return h
	}
	m := newHostMatcher(allowed)
	refusal := "syncd answers only requests for the hosts in http.allowed_hosts, IP addresses and localhost"
	if len(allowed) == 0 {
		refusal = "syncd listens on a loopback address and answers only requests for localhost or an IP address"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.allows(r) {
			http.Error(w, refusal+" (Host "+strconv.Quote(r.Host)+")", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// onLoopback reports whether ln listens on a loopback address.
func onLoopback(ln net.Listener) bool {
	a, ok := ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// hostMatcher is hostGuard's test of a request's Host.
type hostMatcher struct {
	names    map[string]bool // exact names, lower case without a trailing dot
	suffixes []string        // ".example.com" for "*.example.com"
}

// newHostMatcher takes the names of allowed; its IP addresses are
// allowed as every address is.
func newHostMatcher(allowed []string) *hostMatcher {
	m := &hostMatcher{names: make(map[string]bool)}
	for _, h := range allowed {
		if _, err := netip.ParseAddr(h); err == nil {
			continue
		} else if domain, ok := strings.CutPrefix(h, "*."); ok {
			m.suffixes = append(m.suffixes, "."+domain)
		} else {
			m.names[h] = true
		}
	}
	return m
}

// allows reports whether r's Host may be served (see hostGuard).
func (m *hostMatcher) allows(r *http.Request) bool {
	host := r.Host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if _, err := netip.ParseAddr(host); err == nil || host == "" {
		return true
	}
	local := localIP(r)
	if m.names[host] || local.IsLoopback() && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
		return true
	}
	for _, s := range m.suffixes {
		if len(host) > len(s) && strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// localIP is the address r's connection came in on; the zero Addr if
// not a TCP one.
func localIP(r *http.Request) netip.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if a == nil {
		return netip.Addr{}
	}
	ip, _ := netip.AddrFromSlice(a.IP)
	return ip.Unmap()
}
