package main

import (
	stdlog "log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// The status server's bounds. An audit held 1,009 idle keep-alive
// connections open against a daemon without them: it ran out of file
// descriptors, its Redis dials failed and two items were quarantined. A
// scraper and a probe or two need a handful of connections; the rest are
// refused at once, so a flood costs the daemon at most maxConns
// descriptors and a client learns at once instead of hanging.
const (
	maxConns          = 64
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 16 << 10
)

// statusServer returns the server for h with the bounds above, and ln
// capped to serve it on (srv.Serve(capped)): the one server of run and
// ui.
func statusServer(ln net.Listener, h http.Handler, log zerolog.Logger) (srv *http.Server, capped net.Listener) {
	srv = &http.Server{Handler: loopbackOnly(ln, h), ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes, ErrorLog: stdLogger(log)}
	return srv, &capListener{Listener: ln, max: maxConns}
}

// capListener accepts at most max connections at once; one over the cap
// is closed as soon as it is accepted.
type capListener struct {
	net.Listener
	mu   sync.Mutex
	open int
	max  int
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		ok := l.open < l.max
		if ok {
			l.open++
		}
		l.mu.Unlock()
		if ok {
			return &cappedConn{Conn: c, l: l}, nil
		}
		c.Close()
	}
}

type cappedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// stdLogger routes net/http's own messages (accept errors, TLS
// handshakes) to the daemon's log instead of the standard logger.
func stdLogger(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(log.With().Str("component", "http").Logger(), "", 0)
}

// loopbackOnly guards a server listening on a loopback address against
// DNS rebinding: a web page whose name an attacker points at 127.0.0.1
// could otherwise read the API and the page through a browser on the
// same host (an attacker's trial did, with chromium). Such a request
// names the attacker's host; one that names localhost or a loopback
// address is served. A server on another address is reached by whatever
// names its network gives it, and is left as it is.
func loopbackOnly(ln net.Listener, h http.Handler) http.Handler {
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !a.IP.IsLoopback() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if ip := net.ParseIP(strings.Trim(host, "[]")); host != "localhost" && !strings.HasSuffix(host, ".localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "syncd listens on a loopback address and answers only requests for localhost or a loopback address (Host "+strconv.Quote(r.Host)+")", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
