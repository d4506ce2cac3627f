package engine

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/ownership"
)

// Defaults and limits of Config.
const (
	WorkersDefault      = 4
	WorkersMax          = 10000
	IntervalDefault     = time.Minute
	BatchDefault        = 32
	BatchMax            = 1000
	MaxAttemptsDefault  = 5
	BackoffMinDefault   = time.Second
	BackoffMaxDefault   = 5 * time.Minute
	DrainTimeoutDefault = 30 * time.Second
	PollDefault         = 250 * time.Millisecond
	// ClaimAheadPerWorker and ClaimAheadMin make the default of
	// Config.ClaimAhead: ClaimAheadPerWorker per worker, at least
	// ClaimAheadMin, at most ClaimAheadMax.
	ClaimAheadPerWorker = 8
	ClaimAheadMin       = 1024
	// ClaimAheadOff turns claiming ahead off (Config.ClaimAhead).
	ClaimAheadOff = -1
	ClaimAheadMax = 100_000
	// CountIntervalDefault and CountIntervalMin bound Config.CountInterval.
	CountIntervalDefault = 10 * time.Second
	CountIntervalMin     = 100 * time.Millisecond
)

// Config configures an Engine. Zero values mean the defaults written on
// each field; WithDefaults applies them.
type Config struct {
	// Workers is how many syncs run at once. Default WorkersDefault (4);
	// at most WorkersMax.
	Workers int
	// Interval is how long after its lastSync an item is due again.
	// Default IntervalDefault (1m); at least 1ms.
	Interval time.Duration
	// Batch is the most items claimed in one round trip. Default
	// BatchDefault (32); at most BatchMax.
	Batch int
	// MaxAttempts is how many consecutive failures quarantine an item.
	// Default MaxAttemptsDefault (5).
	MaxAttempts int
	// BackoffMin and BackoffMax bound the retry delay after a failure: it
	// starts at BackoffMin, doubles per attempt up to BackoffMax, with
	// jitter up to the next doubling (the first retry comes after 1 to 2
	// BackoffMin). Defaults BackoffMinDefault (1s) and BackoffMaxDefault
	// (5m).
	BackoffMin, BackoffMax time.Duration
	// DrainTimeout is how long Stop lets in-flight syncs finish before it
	// cancels them. Default DrainTimeoutDefault (30s).
	DrainTimeout time.Duration
	// Poll is how long the scheduler waits before looking again when
	// nothing is due. Default PollDefault (250ms); at least 1ms.
	Poll time.Duration
	// ClaimAhead bounds the claims made ahead of free workers: claims
	// whose round trips, settle window (Ownership.Settle) and confirm
	// read run while earlier syncs still occupy the workers, so that
	// neither costs a worker anything. It counts claims under way and
	// confirmed leases waiting for a worker; how many are made is
	// adapted to how fast the workers free up, so that one waits a sync
	// or two for its worker, and a lease that waits longer than a
	// claim's lag (measured: round trips and settle) + mean sync is
	// handed back. It is a bound, not a target: 16 workers with 100ms
	// syncs and a 500ms settle hold about 100. Default
	// ClaimAheadPerWorker (8) x Workers, at least ClaimAheadMin (1024),
	// at most ClaimAheadMax; ClaimAheadOff (-1) turns it off (a claim
	// then holds its worker through its round trips and settle
	// window). The bound is what
	// holds when syncs take microseconds and the engine, not the
	// workers, limits the rate: too large, it claims more than can start
	// within the wait bound (64 workers, a no-op sink and a 50ms settle
	// ran at 1k items/s with 4096, at 16k with 1024).
	ClaimAhead int
	// CountInterval is how often the engine counts the items by state,
	// per shard (store.Counts: a few commands a shard, bounded whatever
	// the set's size), for the syncd_items gauges and Metrics.Items.
	// Counting on a timer, not on scrape, keeps a scrape from costing
	// Redis anything. Default CountIntervalDefault (10s); at least
	// CountIntervalMin (100ms).
	CountInterval time.Duration
	// Version is the program's version, shown in the daemon registry
	// (store.DaemonInfo) and in syncd_build_info. Default "": the
	// registry shows none, syncd_build_info the module version the Go
	// toolchain recorded for syncd.
	Version string
	// Target is the target's fleet-wide limits and breaker (see
	// TargetConfig); WithDefaults applies its defaults.
	Target TargetConfig
	// Items says where the item set comes from: its sources, reconciled
	// and restored after Redis lost its data (see ItemsConfig).
	Items ItemsConfig
	// Ownership is the claim protocol's timing. WithDefaults leaves it
	// as it is: ownership.Config applies its own defaults.
	Ownership ownership.Config
	// Logger receives logs. The zero value logs nothing.
	Logger zerolog.Logger
	// TracerProvider, if set, receives the engine's spans: one per claim
	// and one per sync (SpanClaim, SpanSync), and the sink gets the
	// sync's span in its context. Default nil: no spans, at the cost of
	// a nil check. The engine never uses otel's global provider.
	TracerProvider trace.TracerProvider
}

// ConfigError names the field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "engine: " + e.Field + ": " + e.Reason }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.BackoffMin = cmp.Or(c.BackoffMin, BackoffMinDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.Poll = cmp.Or(c.Poll, PollDefault)
	c.ClaimAhead = cmp.Or(c.ClaimAhead, min(max(ClaimAheadPerWorker*c.Workers, ClaimAheadMin), ClaimAheadMax))
	c.CountInterval = cmp.Or(c.CountInterval, CountIntervalDefault)
	c.Target = c.Target.WithDefaults()
	c.Items.Refresh = cmp.Or(c.Items.Refresh, RefreshDefault)
	c.Items.MaxRemoval = cmp.Or(c.Items.MaxRemoval, MaxRemovalDefault)
	return c
}

// Validate checks c after applying defaults, and c.Ownership. It returns
// every bad field, each a *ConfigError (an *ownership.ConfigError for the
// ownership fields), joined with errors.Join; nil when c is good.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

func (c Config) resolve() (Config, error) {
	c = c.WithDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if c.Workers < 1 || c.Workers > WorkersMax {
		bad("workers", "%d is outside 1..%d", c.Workers, WorkersMax)
	}
	if c.Batch < 1 || c.Batch > BatchMax {
		bad("batch", "%d is outside 1..%d", c.Batch, BatchMax)
	}
	if c.MaxAttempts < 1 {
		bad("max_attempts", "%d is below 1", c.MaxAttempts)
	}
	if c.Interval < time.Millisecond {
		bad("interval", "%v is below 1ms", c.Interval)
	}
	if c.BackoffMin < time.Millisecond {
		bad("backoff_min", "%v is below 1ms", c.BackoffMin)
	} else if c.BackoffMax < c.BackoffMin {
		bad("backoff_max", "%v is below backoff_min (%v)", c.BackoffMax, c.BackoffMin)
	}
	if c.DrainTimeout < 0 {
		bad("drain_timeout", "%v is negative", c.DrainTimeout)
	}
	if c.Poll < time.Millisecond {
		bad("poll", "%v is below 1ms", c.Poll)
	}
	if c.ClaimAhead < ClaimAheadOff || c.ClaimAhead > ClaimAheadMax {
		bad("claim_ahead", "%d is outside -1..%d (-1: off, 0: the default)", c.ClaimAhead, ClaimAheadMax)
	}
	if c.CountInterval < CountIntervalMin {
		bad("count_interval", "%v is below %v", c.CountInterval, CountIntervalMin)
	}
	c.Target.validate(bad)
	if c.Items.Refresh > 0 && c.Items.Refresh < time.Second {
		bad("items.refresh", "%v is below 1s", c.Items.Refresh)
	}
	if c.Items.MaxRemoval < 0 || c.Items.MaxRemoval > 100 {
		bad("items.max_removal", "%d is outside 0..100 (percent of the set)", c.Items.MaxRemoval)
	}
	errs = append(errs, c.Ownership.Validate())
	return c, errors.Join(errs...)
}
