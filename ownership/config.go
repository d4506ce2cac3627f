package ownership

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"
	"github.com/syncd/syncd/store"
)

// Config holds the timing of the protocol. Zero values mean the defaults
// written on each field.
type Config struct {
	// TTL is how long a claim lives in Redis without a heartbeat.
	// Default 30s; at least 10ms.
	TTL time.Duration
	// Heartbeat is how often leases are extended. Default TTL/3; must be
	// below TTL - Margin.
	Heartbeat time.Duration
	// Settle is how long to wait after a claim before re-reading it to
	// confirm it (catches claims lost to a failover). Default 0: no wait
	// and no confirm read, unless a claim's reply was lost. Must be below
	// TTL - Margin.
	Settle time.Duration
	// Margin is taken off the trust window to cover clock drift between
	// this host and Redis and the round trip. Default TTL/10 + 2ms (the
	// Redlock drift allowance, rounded up); must be below TTL/2.
	Margin time.Duration
	// MinReplicas > 0 counts a claim only after that many replicas
	// acknowledged it (WAIT). Default 0.
	MinReplicas int
	// ReplicaTimeout bounds the WAIT. Default TTL/10.
	ReplicaTimeout time.Duration
	// Owner identifies this process in records. Default: the host name,
	// the pid and a random run id.
	Owner store.Owner
	// Logger receives logs. The zero value logs nothing.
	Logger zerolog.Logger
}

// ConfigError names the field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "ownership: " + e.Field + ": " + e.Reason }

// Validate checks c after applying defaults, naming the first bad field.
// It has no side effects.
func (c Config) Validate() error {
	_, err := c.check()
	return err
}

// resolve applies every default, including the owner identity, and
// checks the result.
func (c Config) resolve() (Config, error) {
	c, err := c.check()
	if err != nil {
		return c, err
	}
	if c.Owner.Host == "" {
		c.Owner.Host, _ = os.Hostname()
		if c.Owner.Host == "" {
			c.Owner.Host = "unknown"
		}
	}
	if c.Owner.PID == 0 {
		c.Owner.PID = os.Getpid()
	}
	if c.Owner.Run == "" {
		c.Owner.Run = NewRunID()
	}
	return c, nil
}

// check applies the timing defaults and validates.
func (c Config) check() (Config, error) {
	bad := func(field, format string, args ...any) (Config, error) {
		return c, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.TTL == 0 {
		c.TTL = 30 * time.Second
	}
	if c.TTL < 10*time.Millisecond {
		return bad("ttl", "%v is below 10ms", c.TTL)
	}
	if c.Margin == 0 {
		c.Margin = c.TTL/10 + 2*time.Millisecond
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.TTL / 3
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = c.TTL / 10
	}
	trust := c.TTL - c.Margin
	switch {
	case c.Margin < 0 || c.Margin >= c.TTL/2:
		return bad("margin", "%v must be positive and below ttl/2 (%v)", c.Margin, c.TTL/2)
	case c.Heartbeat < 0 || c.Heartbeat >= trust:
		return bad("heartbeat", "%v must be positive and below ttl - margin (%v)", c.Heartbeat, trust)
	case c.Heartbeat < time.Millisecond:
		return bad("heartbeat", "%v is below 1ms", c.Heartbeat)
	case c.Settle < 0 || c.Settle >= trust:
		return bad("settle", "%v must not be negative and must be below ttl - margin (%v)", c.Settle, trust)
	case c.MinReplicas < 0:
		return bad("min_replicas", "%d is negative", c.MinReplicas)
	case c.ReplicaTimeout < 0 || c.ReplicaTimeout >= trust:
		return bad("replica_timeout", "%v must be positive and below ttl - margin (%v)", c.ReplicaTimeout, trust)
	case c.Owner.PID < 0 || c.Owner.Worker < 0:
		return bad("owner", "pid and worker must not be negative")
	case strings.ContainsFunc(c.Owner.Host+c.Owner.Run, func(r rune) bool { return r == '/' || unicode.IsControl(r) }):
		return bad("owner", "host and run must not contain '/' or control characters")
	}
	return c, nil
}

// NewRunID returns a short random id for one run of a process.
func NewRunID() string {
	var b [5]byte
	rand.Read(b[:])
	return base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])
}
