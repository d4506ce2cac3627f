package engine

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
)

// Config configures an Engine. Zero values mean the defaults written on
// each field.
type Config struct {
	// Workers is how many syncs run at once. Default 4.
	Workers int
	// Interval is how long after its lastSync an item is due again.
	// Default 1m.
	Interval time.Duration
	// Batch is the most items claimed in one round trip. Default 32.
	Batch int
	// MaxAttempts is how many consecutive failures quarantine an item.
	// Default 5.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the retry delay after a failure: it
	// starts at BackoffMin, doubles per attempt up to BackoffMax, with
	// jitter. Defaults 1s and 5m.
	BackoffMin, BackoffMax time.Duration
	// DrainTimeout is how long Stop lets in-flight syncs finish before it
	// cancels them. Default 30s.
	DrainTimeout time.Duration
	// Poll is how long the scheduler waits before looking again when
	// nothing is due. Default 250ms.
	Poll time.Duration
	// Ownership is the claim protocol's timing.
	Ownership ownership.Config
	// Logger receives logs. The zero value logs nothing.
	Logger zerolog.Logger
}

// ConfigError names the field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "engine: " + e.Field + ": " + e.Reason }

// Validate checks c after applying defaults, naming the first bad field.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

func (c Config) resolve() (Config, error) {
	bad := func(field, format string, args ...any) (Config, error) {
		return c, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Batch == 0 {
		c.Batch = 32
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	def(&c.Interval, time.Minute)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, 5*time.Minute)
	def(&c.DrainTimeout, 30*time.Second)
	def(&c.Poll, 250*time.Millisecond)
	switch {
	case c.Workers < 1 || c.Workers > 10000:
		return bad("workers", "%d is outside 1..10000", c.Workers)
	case c.Batch < 1 || c.Batch > 1000:
		return bad("batch", "%d is outside 1..1000", c.Batch)
	case c.MaxAttempts < 1:
		return bad("max_attempts", "%d is below 1", c.MaxAttempts)
	case c.Interval < time.Millisecond:
		return bad("interval", "%v is below 1ms", c.Interval)
	case c.BackoffMin < time.Millisecond:
		return bad("backoff_min", "%v is below 1ms", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin:
		return bad("backoff_max", "%v is below backoff_min (%v)", c.BackoffMax, c.BackoffMin)
	case c.DrainTimeout < 0:
		return bad("drain_timeout", "%v is negative", c.DrainTimeout)
	case c.Poll < time.Millisecond:
		return bad("poll", "%v is below 1ms", c.Poll)
	}
	if err := c.Ownership.Validate(); err != nil {
		return c, err
	}
	return c, nil
}
