package ownership

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
)

// Validate reports every bad field at once, each a *ConfigError, except
// what is measured against a bad ttl or margin.
func TestConfigValidateEveryField(t *testing.T) {
	tests := []struct {
		cfg  Config
		want []string
	}{
		{Config{TTL: time.Second, Heartbeat: time.Second, Settle: -1, ReplicaTimeout: time.Second, MinReplicas: -1,
			Owner: store.Owner{Host: "a/b", PID: -1}}, []string{
			"ownership: heartbeat: 1s must be positive and below ttl - margin (898ms)",
			"ownership: settle: -1ns must not be negative and must be below ttl - margin (898ms)",
			"ownership: replica_timeout: 1s must be positive and below ttl - margin (898ms)",
			"ownership: min_replicas: -1 is negative",
			"ownership: owner: pid and worker must not be negative",
			"ownership: owner: host and run must not contain '/' or control characters",
		}},
		{Config{TTL: 5 * time.Millisecond, Heartbeat: time.Hour, MinReplicas: -1}, []string{"ownership: ttl: 5ms is below 10ms"}},
		{Config{Margin: 20 * time.Second, Heartbeat: time.Hour, MinReplicas: -1}, []string{
			"ownership: margin: 20s must be positive and below ttl/2 (15s)",
			"ownership: min_replicas: -1 is negative",
		}},
		{Config{Heartbeat: 500 * time.Microsecond}, []string{"ownership: heartbeat: 500µs is below 1ms"}},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tt.want) {
			t.Errorf("Validate(%+v) got\n%s\nwant\n%s", tt.cfg, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("Validate(%+v) = %#v; errors.As finds no *ConfigError", tt.cfg, err)
		}
	}
}

func TestConfigWithDefaults(t *testing.T) {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	got := Config{}.WithDefaults()
	if got.TTL != TTLDefault || got.Margin != 3002*time.Millisecond || got.Heartbeat != 10*time.Second ||
		got.ReplicaTimeout != 3*time.Second || got.Owner.Host != host || got.Owner.PID != os.Getpid() || got.Owner.Run == "" {
		t.Errorf("Config{}.WithDefaults() = %+v", got)
	}
	got = Config{TTL: time.Second, Settle: time.Millisecond}.WithDefaults()
	if got.Margin != 102*time.Millisecond || got.Heartbeat != time.Second/3 || got.ReplicaTimeout != 100*time.Millisecond || got.Settle != time.Millisecond {
		t.Errorf("derived defaults of a 1s ttl: %+v", got)
	}
	set := Config{TTL: time.Second, Heartbeat: 2 * time.Millisecond, Margin: 3 * time.Millisecond, ReplicaTimeout: 4 * time.Millisecond,
		Owner: store.Owner{Host: "h", PID: 7, Run: "r"}}
	if got := set.WithDefaults(); !reflect.DeepEqual(got, set) {
		t.Errorf("WithDefaults changed fields that were set: %+v; want %+v", got, set)
	}
}
