// Package log provides a sink that logs each sync and does nothing else.
//
// It is the sink of the demo configuration: with Delay it simulates slow
// work (and shows lease loss cutting a sync short), and with FailEvery it
// fails some syncs so that retries, backoff and quarantine can be watched.
package log

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
)

// Log field keys.
const (
	fieldComponent = "component"
	fieldID        = "id"
	fieldFence     = "fence"
	fieldOwner     = "owner"
	fieldAttempt   = "attempt"
	fieldLastSync  = "last_sync"
	fieldTook      = "took_ms"
)

// Config configures a log sink. The zero value logs each sync and succeeds
// at once.
type Config struct {
	// Delay is how long each sync pretends to work. A sync whose context is
	// done before Delay elapses returns the context's cause. Default 0.
	Delay time.Duration

	// FailEvery makes every FailEvery-th call of Sync (counted across all
	// items, from 1) fail with an ordinary, retryable error after its
	// delay. Default 0: never fail.
	FailEvery int
}

// Validate reports every invalid field of c, each error naming its field,
// joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	if c.Delay < 0 {
		errs = append(errs, sinks.ConfigErrorf("log", "delay", "must not be negative, got %v", c.Delay))
	}
	if c.FailEvery < 0 {
		errs = append(errs, sinks.ConfigErrorf("log", "fail_every", "must not be negative, got %d", c.FailEvery))
	}
	return errors.Join(errs...)
}

// Sink is a sink that logs each sync. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	logger zerolog.Logger
	calls  atomic.Uint64
}

var _ sinks.Sink = (*Sink)(nil)

// New returns a log sink that logs to a sub-logger of logger with the field
// component=sink.log.
func New(cfg Config, logger zerolog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sink{
		cfg:    cfg,
		logger: logger.With().Str(fieldComponent, "sink.log").Logger(),
	}, nil
}

// errSimulated is the failure FailEvery injects.
var errSimulated = errors.New("simulated failure")

// Sync waits for the configured delay, then logs the item at info level with
// the message "synced", or, on every FailEvery-th call, "sync failed" and
// returns an error. If ctx is done first it returns an error wrapping
// context.Cause(ctx), logged as "sync cancelled". The error itself is not
// logged: the engine logs what Sync returns.
func (s *Sink) Sync(ctx context.Context, item sinks.Item) error {
	n := s.calls.Add(1)
	start := time.Now()

	err := s.work(ctx)
	if err != nil {
		err = fmt.Errorf("log: item %q: %w", item.ID, err)
	} else if every := s.cfg.FailEvery; every > 0 && n%uint64(every) == 0 {
		err = fmt.Errorf("log: item %q: %w (call %d, every %d)", item.ID, errSimulated, n, every)
	}

	ev := s.logger.Info().
		Str(fieldID, item.ID).
		Uint64(fieldFence, item.Fence).
		Str(fieldOwner, item.Owner).
		Int(fieldAttempt, item.Attempt)
	// Format the time here, not with zerolog's global TimeFieldFormat,
	// which is second-precision by default and belongs to the program.
	if !item.LastSync.IsZero() {
		ev = ev.Str(fieldLastSync, item.LastSync.Format(time.RFC3339Nano))
	} else {
		ev = ev.Interface(fieldLastSync, nil)
	}
	ev = ev.Float64(fieldTook, ms(time.Since(start)))
	switch {
	case err == nil:
		ev.Msg("synced")
	case ctx.Err() != nil:
		ev.Msg("sync cancelled")
	default:
		ev.Msg("sync failed")
	}
	return err
}

func (s *Sink) work(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if s.cfg.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(s.cfg.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Close does nothing and returns nil.
func (s *Sink) Close() error { return nil }

// ms is d in milliseconds, to the microsecond: a sync may take less
// than one.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
