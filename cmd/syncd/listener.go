package main

import (
	stdlog "log"

	"github.com/rs/zerolog"
	"net"
	"sync"
	"time"
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
