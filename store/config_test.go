package store_test

import (
	"crypto/tls"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/store"
)

// Validate reports every bad field at once, each found by errors.As.
func TestConfigValidateEveryField(t *testing.T) {
	cfg := store.Config{Addrs: []string{"a", "b:1", ":2", "h:99999", "h:0", "h:x", "bad host:6379", "[::1]:6379"}, Cluster: true, MasterName: "m", DB: 3, Shards: 2000,
		TLS: &tls.Config{InsecureSkipVerify: true}, ReadTimeout: -1, ClusterReload: -1, PoolSize: -3, KeyPrefix: "my{prefix}"}
	err := cfg.Validate()
	want := []string{
		`store: addrs[0]: "a" is not host:port`,
		`store: addrs[2]: ":2" is not host:port`,
		`store: addrs[3]: "h:99999": the port must be a number from 1 to 65535`,
		`store: addrs[4]: "h:0": the port must be a number from 1 to 65535`,
		`store: addrs[5]: "h:x": the port must be a number from 1 to 65535`,
		`store: addrs[6]: "bad host:6379": the host has a space or a control character`,
		"store: master_name: cannot be combined with cluster",
		"store: db: a Cluster has only database 0",
		"store: shards: 2000 is outside 1..1024",
		"store: tls: skipping certificate verification is not supported",
		"store: read_timeout: must not be negative",
		"store: cluster_reload: must not be negative",
		"store: pool_size: must not be negative",
		`store: key_prefix: "my{prefix}" must not contain braces, glob characters or spaces`,
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("Validate got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ce *store.ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("errors.As finds no *store.ConfigError in %#v", err)
	}
	if err := (&store.Config{DB: 16, KeyPrefix: "a\x01"}).Validate(); err == nil ||
		err.Error() != "store: db: 16 is outside 0..15\nstore: key_prefix: must not contain control characters" {
		t.Errorf("Validate = %v", err)
	}
}

func TestConfigWithDefaults(t *testing.T) {
	want := store.Config{KeyPrefix: "syncd", Shards: 16, DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second,
		WriteTimeout: 3 * time.Second, ClusterReload: time.Second}
	if got := (store.Config{}).WithDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.WithDefaults() = %+v; want %+v", got, want)
	}
	set := store.Config{KeyPrefix: "p", Shards: 1, DialTimeout: 1, ReadTimeout: 2, WriteTimeout: 3, ClusterReload: 4, PoolSize: 5}
	if got := set.WithDefaults(); !reflect.DeepEqual(got, set) {
		t.Errorf("WithDefaults changed fields that were set = %+v; want %+v", got, set)
	}
}
