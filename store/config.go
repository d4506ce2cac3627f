package store

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Config says how to reach Redis and how to lay out keys. The zero value
// is an embedded, single-process store with the default prefix and shards.
type Config struct {
	// Addrs are host:port addresses. Empty: the embedded in-process store
	// (single process only; nothing survives a restart). One address: a
	// single server. With MasterName: Sentinel addresses. With Cluster:
	// seed nodes of a Redis Cluster.
	Addrs []string
	// MasterName selects Sentinel mode: the name of the monitored master.
	MasterName string
	// Cluster selects Redis Cluster mode.
	Cluster bool
	// Username and Password authenticate (ACL user or requirepass). The
	// caller reads the password from wherever it is kept; the store never
	// logs it and Redacted hides it.
	Username string
	Password string
	// SentinelPassword authenticates to the Sentinels, when they need it.
	SentinelPassword string
	// DB selects the database (single and Sentinel only). Default 0.
	DB int
	// TLS enables TLS with this configuration. InsecureSkipVerify is
	// refused: a claim protocol that trusts any server is not one.
	TLS *tls.Config
	// KeyPrefix starts every key. Default "syncd".
	KeyPrefix string
	// Shards is the number of due-index shards; on a Cluster they spread
	// over the masters. It is fixed for a deployment (checked at start).
	// Default 16, at most 1024.
	Shards int
	// RefuseEviction makes Open fail when Redis's maxmemory-policy could
	// evict claim keys (anything but noeviction). By default it logs a
	// warning at error level instead.
	RefuseEviction bool
	// DialTimeout, ReadTimeout and WriteTimeout bound each network step.
	// Defaults 5s, 3s, 3s.
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// PoolSize is the connection pool size per node. Default: go-redis's
	// (10 per CPU).
	PoolSize int
	// ClusterReload is how often a Cluster client refreshes the slot map.
	// go-redis's default is 60 s, which left writes failing for 59 s after
	// a master died in our tests; default here 1s.
	ClusterReload time.Duration
	// Logger receives the store's logs. The zero value logs nothing.
	Logger zerolog.Logger
}

// Defaults.
const (
	DefaultKeyPrefix = "syncd"
	DefaultShards    = 16
	MaxShards        = 1024
)

// ConfigError names the field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "store: " + e.Field + ": " + e.Reason }

// Embedded reports whether c selects the embedded store.
func (c *Config) Embedded() bool { return len(c.Addrs) == 0 }

func (c *Config) withDefaults() Config {
	d := *c
	if d.KeyPrefix == "" {
		d.KeyPrefix = DefaultKeyPrefix
	}
	if d.Shards == 0 {
		d.Shards = DefaultShards
	}
	if d.DialTimeout == 0 {
		d.DialTimeout = 5 * time.Second
	}
	if d.ReadTimeout == 0 {
		d.ReadTimeout = 3 * time.Second
	}
	if d.WriteTimeout == 0 {
		d.WriteTimeout = 3 * time.Second
	}
	if d.ClusterReload == 0 {
		d.ClusterReload = time.Second
	}
	return d
}

// Validate checks c, naming the first bad field.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	for i, a := range c.Addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return bad(fmt.Sprintf("addrs[%d]", i), "%q is not host:port", a)
		}
	}
	switch {
	case c.Cluster && c.MasterName != "":
		return bad("master_name", "cannot be combined with cluster")
	case c.Cluster && c.DB != 0:
		return bad("db", "a Cluster has only database 0")
	case c.Embedded() && (c.Cluster || c.MasterName != ""):
		return bad("addrs", "cluster and master_name need addresses")
	case c.DB < 0 || c.DB > 15:
		return bad("db", "%d is outside 0..15", c.DB)
	case c.Shards < 0 || c.Shards > MaxShards:
		return bad("shards", "%d is outside 1..%d", c.Shards, MaxShards)
	case c.TLS != nil && c.TLS.InsecureSkipVerify:
		return bad("tls", "skipping certificate verification is not supported")
	case c.DialTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.ClusterReload < 0:
		return bad("timeouts", "must not be negative")
	case c.PoolSize < 0:
		return bad("pool_size", "must not be negative")
	}
	if strings.ContainsAny(c.KeyPrefix, "{}*?[] \\") {
		return bad("key_prefix", "%q must not contain braces, glob characters or spaces", c.KeyPrefix)
	}
	for _, r := range c.KeyPrefix {
		if r < 0x20 || r == 0x7f {
			return bad("key_prefix", "must not contain control characters")
		}
	}
	return nil
}

// Redacted returns a copy of c that is safe to print.
func (c Config) Redacted() Config {
	if c.Password != "" {
		c.Password = "[redacted]"
	}
	if c.SentinelPassword != "" {
		c.SentinelPassword = "[redacted]"
	}
	return c
}
