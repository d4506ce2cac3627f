package store

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
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
	// NoCreate makes Open write nothing: for a process that only reads
	// (status, items list, a read-only page). Open then checks the shard
	// count only when the deployment has one, leaves a missing shard
	// count and marker missing, and reports with Store.Deployed whether
	// Redis holds the deployment at all. By default Open creates what is
	// missing, as a process that claims or adds items needs.
	NoCreate bool
	// RefuseEviction makes Open fail when Redis's maxmemory-policy could
	// evict claim keys (anything but noeviction). By default it logs a
	// warning at error level instead.
	RefuseEviction bool
	// RequirePersistence makes Open fail when a master runs without AOF
	// (ErrNoPersistence): a restart of such a Redis loses the item set
	// (syncd restores it from its sources, but items added by hand are
	// gone). Default false.
	RequirePersistence bool
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
	// AutoPipeline sends the hot commands (lock and unlock, claims,
	// heartbeats, releases) through go-redis's auto-pipeliner
	// (Client.AutoPipeline, experimental), which writes the commands that
	// concurrent callers send at the same time as one pipeline: fewer
	// round trips, syscalls and Redis CPU per command under load, the same
	// single round trip for a lone caller. A batch is re-sent whole after
	// a dropped connection; the scripts it carries are idempotent for
	// their own token (see the scripts' comments). A command's ctx bounds
	// its wait in the queue no longer: Read/WriteTimeout bound it, as they
	// bound a read on a plain connection. Outside Cluster it also
	// gathers concurrent Lock and Unlock calls into one lock.lua and one
	// unlock_batch.lua call per round trip, two round trips in flight, at
	// most one of them with unlocks (see coalescer): a call whose ctx
	// ends while it waits is never sent.
	// Default AutoPipelineDefault.
	AutoPipeline bool
	// Logger receives the store's logs. The zero value logs nothing.
	Logger zerolog.Logger
}

// Defaults and limits of Config.
const (
	KeyPrefixDefault     = "syncd"
	ShardsDefault        = 16
	ShardsMax            = 1024
	DBMax                = 15
	DialTimeoutDefault   = 5 * time.Second
	ReadTimeoutDefault   = 3 * time.Second
	WriteTimeoutDefault  = 3 * time.Second
	ClusterReloadDefault = time.Second
	// AutoPipelineDefault is what callers that build a Config from
	// settings (cmd/syncd's redis.auto_pipeline) use when nothing is set:
	// on, since tests/fault and tests/topology pass with it on (build tag
	// syncd_autopipeline). The zero Config leaves it off.
	AutoPipelineDefault = true
)

// ConfigError names the field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "store: " + e.Field + ": " + e.Reason }

// Embedded reports whether c selects the embedded store.
func (c *Config) Embedded() bool { return len(c.Addrs) == 0 }

// WithDefaults returns c with every zero field set to its default.
// PoolSize stays 0, go-redis's default.
func (c Config) WithDefaults() Config {
	c.KeyPrefix = cmp.Or(c.KeyPrefix, KeyPrefixDefault)
	c.Shards = cmp.Or(c.Shards, ShardsDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, ReadTimeoutDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.ClusterReload = cmp.Or(c.ClusterReload, ClusterReloadDefault)
	return c
}

// Validate checks c. It returns every bad field, each a *ConfigError,
// joined with errors.Join; nil when c is good. Zero values are good: they
// mean the defaults.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	// A bad address fails here, not as a server that does not answer:
	// run retried "127.0.0.1:99999" for ever (an operator's trial).
	for i, a := range c.Addrs {
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.ParseUint(port, 10, 16)
		switch {
		case err != nil || host == "" || port == "":
			bad(fmt.Sprintf("addrs[%d]", i), "%q is not host:port", a)
		case perr != nil || n == 0:
			bad(fmt.Sprintf("addrs[%d]", i), "%q: the port must be a number from 1 to 65535", a)
		case strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			bad(fmt.Sprintf("addrs[%d]", i), "%q: the host has a space or a control character", a)
		}
	}
	if c.Cluster && c.MasterName != "" {
		bad("master_name", "cannot be combined with cluster")
	}
	if c.Embedded() && (c.Cluster || c.MasterName != "") {
		bad("addrs", "cluster and master_name need addresses")
	}
	if c.Cluster && c.DB != 0 {
		bad("db", "a Cluster has only database 0")
	} else if c.DB < 0 || c.DB > DBMax {
		bad("db", "%d is outside 0..%d", c.DB, DBMax)
	}
	if c.Shards < 0 || c.Shards > ShardsMax {
		bad("shards", "%d is outside 1..%d", c.Shards, ShardsMax)
	}
	if c.TLS != nil && c.TLS.InsecureSkipVerify {
		bad("tls", "skipping certificate verification is not supported")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"dial_timeout", c.DialTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}, {"cluster_reload", c.ClusterReload}} {
		if d.v < 0 {
			bad(d.field, "must not be negative")
		}
	}
	if c.PoolSize < 0 {
		bad("pool_size", "must not be negative")
	}
	if strings.ContainsAny(c.KeyPrefix, "{}*?[] \\") {
		bad("key_prefix", "%q must not contain braces, glob characters or spaces", c.KeyPrefix)
	} else if strings.ContainsFunc(c.KeyPrefix, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		bad("key_prefix", "must not contain control characters")
	}
	return errors.Join(errs...)
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
