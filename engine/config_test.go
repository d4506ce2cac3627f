package engine_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
)

// Validate reports every bad field at once, the ownership ones included,
// each found by errors.As.
func TestConfigValidateEveryField(t *testing.T) {
	cfg := engine.Config{Workers: -1, Batch: 5000, MaxAttempts: -2, Interval: time.Microsecond, BackoffMin: 2 * time.Minute,
		BackoffMax: time.Minute, DrainTimeout: -time.Second, Poll: time.Microsecond, ClaimAhead: -2, CountInterval: time.Millisecond,
		Target: engine.TargetConfig{Rate: engine.Rate{N: 2_000_000, Per: time.Second}, Burst: -1, MaxInFlight: -1,
			Breaker: engine.BreakerConfig{Failures: 1, ProbeInterval: time.Millisecond, Window: time.Microsecond}},
		Ownership: ownership.Config{TTL: time.Second, Heartbeat: time.Second}}
	err := cfg.Validate()
	want := []string{
		"engine: workers: -1 is outside 1..10000",
		"engine: batch: 5000 is outside 1..1000",
		"engine: max_attempts: -2 is below 1",
		"engine: interval: 1µs is below 1ms",
		"engine: backoff_max: 1m0s is below backoff_min (2m0s)",
		"engine: drain_timeout: -1s is negative",
		"engine: poll: 1µs is below 1ms",
		"engine: claim_ahead: -2 is outside -1..100000 (-1: off, 0: the default)",
		"engine: count_interval: 1ms is below 100ms",
		"engine: target.rate: 2000000/s is above 1000000/s",
		"engine: target.burst: -1 is outside 1..1000000",
		"engine: target.max_in_flight: -1 is outside 0..1000000",
		"engine: target.breaker.failures: 1 is below 2: one item failing alone must never open the breaker",
		"engine: target.breaker.probe_interval: 1ms is below 10ms",
		"engine: target.breaker.window: 1µs is below probe_interval (1ms)",
		"ownership: heartbeat: 1s must be positive and below ttl - margin (898ms)",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("Validate got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ee *engine.ConfigError
	var oe *ownership.ConfigError
	if !errors.As(err, &ee) || !errors.As(err, &oe) {
		t.Errorf("errors.As finds no *engine.ConfigError or no *ownership.ConfigError in %#v", err)
	}
}

func TestConfigWithDefaults(t *testing.T) {
	want := engine.Config{Workers: engine.WorkersDefault, Interval: time.Minute, Batch: 32, MaxAttempts: 5, BackoffMin: time.Second,
		BackoffMax: 5 * time.Minute, DrainTimeout: 30 * time.Second, Poll: 250 * time.Millisecond,
		ClaimAhead: engine.ClaimAheadMin, CountInterval: 10 * time.Second,
		Target: engine.TargetConfig{Breaker: engine.BreakerConfig{Failures: 5, ProbeInterval: time.Second, Window: 10 * time.Minute}},
		Items:  engine.ItemsConfig{Refresh: 5 * time.Minute, MaxRemoval: 10}}
	if got := (engine.Config{}).WithDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.WithDefaults() = %+v; want %+v", got, want)
	}
	set := engine.Config{Workers: 1, Interval: 2, Batch: 3, MaxAttempts: 4, BackoffMin: 5, BackoffMax: 6, DrainTimeout: 7, Poll: 8,
		ClaimAhead: 18, CountInterval: 17,
		Target: engine.TargetConfig{Rate: engine.Rate{N: 9, Per: time.Second}, Burst: 10, MaxInFlight: 11,
			Breaker: engine.BreakerConfig{Disabled: true, Failures: 12, ProbeInterval: 13, Window: 14}},
		Items:     engine.ItemsConfig{Refresh: 15, MaxRemoval: 16},
		Ownership: ownership.Config{TTL: time.Second}}
	if got := set.WithDefaults(); !reflect.DeepEqual(got, set) {
		t.Errorf("WithDefaults changed fields that were set = %+v; want %+v", got, set)
	}
}
