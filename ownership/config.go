package ownership

import (
	"cmp"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"
	"github.com/syncd/syncd/store"
)

// Defaults and limits of Config. The defaults of Heartbeat, Margin and
// ReplicaTimeout are derived from TTL, as written on each field.
const (
	TTLDefault = 30 * time.Second
	TTLMin     = 10 * time.Millisecond
	// MarginDriftDefault is the fixed part of the default Margin, which
	// is TTL/10 + MarginDriftDefault.
	MarginDriftDefault = 2 * time.Millisecond
)

// Config holds the timing of the protocol. Zero values mean the defaults
// written on each field; WithDefaults applies them.
type Config struct {
	// TTL is how long a claim lives in Redis without a heartbeat.
	// Default TTLDefault (30s); at least TTLMin (10ms).
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
	// this host and Redis and the round trip. A lease's context is
	// cancelled when its trust window closes, Margin before its claim can
	// expire in Redis. Default TTL/10 + MarginDriftDefault (the Redlock
	// drift allowance, rounded up); must be below TTL/2.
	Margin time.Duration
	// MinReplicas > 0 counts a claim only after that many replicas
	// acknowledged it (WAIT). Default 0.
	MinReplicas int
	// ReplicaTimeout bounds the WAIT. Default TTL/10.
	ReplicaTimeout time.Duration
	// Owner identifies this process in records. Default: the host name
	// ("unknown" when it cannot be read), the pid and a random run id.
	Owner store.Owner
	// Logger receives logs. The zero value logs nothing.
	Logger zerolog.Logger
	// ObserveHeartbeat, when set, is called for each lease a heartbeat
	// extended, with how long the lease's trust window still had to run
	// when the reply landed (before the extension): how close the lease
	// came to being lost. It runs on the heartbeat loop and must not
	// block. The engine feeds syncd_lease_left_at_heartbeat_seconds with
	// it. Default nil.
	ObserveHeartbeat func(left time.Duration)
}

// ConfigError names the field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "ownership: " + e.Field + ": " + e.Reason }

// WithDefaults returns c with every zero field set to its default,
// including the owner identity.
func (c Config) WithDefaults() Config {
	c.TTL = cmp.Or(c.TTL, TTLDefault)
	c.Margin = cmp.Or(c.Margin, c.TTL/10+MarginDriftDefault)
	c.Heartbeat = cmp.Or(c.Heartbeat, c.TTL/3)
	c.ReplicaTimeout = cmp.Or(c.ReplicaTimeout, c.TTL/10)
	c.Owner.Host = cmp.Or(c.Owner.Host, hostname())
	c.Owner.PID = cmp.Or(c.Owner.PID, os.Getpid())
	if c.Owner.Run == "" {
		c.Owner.Run = NewRunID()
	}
	return c
}

// hostname is the OS host name, "unknown" when it cannot be read.
func hostname() string {
	if h, _ := os.Hostname(); h != "" {
		return h
	}
	return "unknown"
}

// Validate checks c after applying defaults. It returns every bad field,
// each a *ConfigError, joined with errors.Join; nil when c is good.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve applies every default and checks the result.
func (c Config) resolve() (Config, error) {
	c = c.WithDefaults()
	return c, c.check()
}

// check validates c, defaults applied.
func (c Config) check() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if c.TTL < TTLMin {
		// Every other timing is measured against the TTL.
		bad("ttl", "%v is below %v", c.TTL, TTLMin)
		return errors.Join(errs...)
	}
	if c.Margin < 0 || c.Margin >= c.TTL/2 {
		bad("margin", "%v must be positive and below ttl/2 (%v)", c.Margin, c.TTL/2)
	} else {
		// Measured against the trust window, which needs a good margin.
		trust := c.TTL - c.Margin
		if c.Heartbeat < 0 || c.Heartbeat >= trust {
			bad("heartbeat", "%v must be positive and below ttl - margin (%v)", c.Heartbeat, trust)
		} else if c.Heartbeat < time.Millisecond {
			bad("heartbeat", "%v is below 1ms", c.Heartbeat)
		}
		if c.Settle < 0 || c.Settle >= trust {
			bad("settle", "%v must not be negative and must be below ttl - margin (%v)", c.Settle, trust)
		}
		if c.ReplicaTimeout < 0 || c.ReplicaTimeout >= trust {
			bad("replica_timeout", "%v must be positive and below ttl - margin (%v)", c.ReplicaTimeout, trust)
		}
	}
	if c.MinReplicas < 0 {
		bad("min_replicas", "%d is negative", c.MinReplicas)
	}
	if c.Owner.PID < 0 || c.Owner.Worker < 0 {
		bad("owner", "pid and worker must not be negative")
	}
	if strings.ContainsFunc(c.Owner.Host+c.Owner.Run, func(r rune) bool { return r == '/' || unicode.IsControl(r) }) {
		bad("owner", "host and run must not contain '/' or control characters")
	}
	return errors.Join(errs...)
}

// NewRunID returns a short random id for one run of a process.
func NewRunID() string {
	var b [5]byte
	rand.Read(b[:])
	return base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])
}
