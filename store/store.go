package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Errors of the store.
var (
	// ErrShardsMismatch: the configured shard count differs from the one
	// the deployment was created with; items would be looked up in the
	// wrong shard.
	ErrShardsMismatch = errors.New("store: shard count differs from the deployment's")
	// ErrEviction: Redis may evict claim keys and RefuseEviction is set.
	ErrEviction = errors.New("store: maxmemory-policy may evict claims")
	// ErrNoPersistence: Config.RequirePersistence and a master without AOF.
	ErrNoPersistence = errors.New("store: redis runs without persistence")
	// ErrHeldOff: the shard is held off after Redis lost its data.
	ErrHeldOff = errors.New("store: shard held off after data loss")
	// ErrEpochMissing: the shard's data-loss marker is missing; see
	// Store.MarkEpoch.
	ErrEpochMissing = errors.New("store: epoch marker missing")
	// ErrNoReplicas: MinReplicas needs real Redis replicas.
	ErrNoReplicas = errors.New("store: replica acknowledgement needs a Redis with replicas")
)

// HoldError is returned by the claim operations while a shard is held
// off.
type HoldError struct {
	Shard int
	For   time.Duration
	// Rewritten reports that the shard's epoch marker was not one syncd
	// writes (1e300, inf, a time more than one ttl ahead, garbage, a key
	// of another type): Redis may have lost data, so the marker was
	// rewritten to hold the shard off one ttl, which is always safe.
	Rewritten bool
}

func (e *HoldError) Error() string {
	if e.Rewritten {
		return fmt.Sprintf("store: shard %d held off for %v: its epoch marker was damaged and is rewritten", e.Shard, e.For)
	}
	return fmt.Sprintf("store: shard %d held off for %v after data loss", e.Shard, e.For)
}

func (e *HoldError) Unwrap() error { return ErrHeldOff }

// Store talks to Redis (or the embedded store) for syncd: the due index,
// item state, owner records and standalone locks. It is safe for
// concurrent use.
type Store struct {
	cfg  Config
	log  zerolog.Logger
	rdb  redis.UniversalClient
	keys Keys
	mini *miniredis.Miniredis // embedded server, nil with real Redis
	// ap is rdb's auto-pipeliner (the deferred face, so that a call's
	// ctx bounds its wait) when Config.AutoPipeline, else nil.
	ap *redis.AutoPipeliner
	// hotCalls counts the hot calls in flight: a lone one goes straight
	// to the client (see runHot).
	hotCalls atomic.Int64
	// lockB gathers concurrent Lock and Unlock calls into one round trip
	// (see coalescer and lockOps): with the auto-pipeliner, outside
	// Cluster (where names are in different slots). Else nil.
	lockB *coalescer[lockOp, lockOpReply]
	// lockRcpt is the key of lockB's unlock receipt (Keys.LockReceipt),
	// this Store's own.
	lockRcpt string
	// closed is set by the first Close.
	closed atomic.Bool
	// fresh: Open created the deployment (see Fresh).
	fresh bool
	// deployed: see Deployed.
	deployed bool
	// deployAge: see DeploymentAge.
	deployAge time.Duration

	stopClock chan struct{}
	clockDone chan struct{}
}

// forceAutoPipeline turns Config.AutoPipeline on for every store: set by
// the build tag syncd_autopipeline (autopipeline_tag.go), for test runs.
var forceAutoPipeline = false

// ServerInfo is what the store read from a Redis server's INFO.
type ServerInfo struct {
	Addr            string
	RunID           string
	Version         string
	UptimeSeconds   int64
	MaxmemoryPolicy string
	AOF             bool
	// UsedMemory, Maxmemory (0: no limit) and NotCountedForEvict (the
	// replication and AOF buffers) are INFO memory's used_memory,
	// maxmemory and mem_not_counted_for_evict, in bytes; see OutOfMemory.
	UsedMemory, Maxmemory, NotCountedForEvict int64
}

// Open connects to Redis as cfg says (or starts the embedded store),
// checks the server and the deployment's shard count, and loads the
// scripts.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	s := &Store{cfg: c, log: c.Logger.With().Str("component", "store").Logger(), keys: NewKeys(c.KeyPrefix, c.Shards)}
	if c.Embedded() {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("store: start embedded store: %w", err)
		}
		s.mini = m
		s.stopClock, s.clockDone = make(chan struct{}), make(chan struct{})
		go s.driveClock()
		s.rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), DialTimeout: c.DialTimeout,
			ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout, PoolSize: c.PoolSize, ContextTimeoutEnabled: true})
		s.log.Warn().Msg("no redis address configured: using the embedded in-process store. It serves this one process only and forgets everything on exit; set redis.addrs to run a fleet")
	} else {
		s.rdb = newClient(c)
	}
	if c.AutoPipeline || forceAutoPipeline {
		ap, err := s.rdb.AsyncAutoPipeline()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("store: auto-pipeline: %w", err)
		}
		s.ap = ap
		if !c.Cluster {
			s.lockB = &coalescer[lockOp, lockOpReply]{run: s.lockOps, max: lockBatchMax, flight: lockBatchFlight,
				exclusive: func(op lockOp) bool { return op.unlock }}
			id := NewToken()
			s.lockRcpt = s.keys.LockReceipt(hex.EncodeToString(id[:]))
		}
	}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// newClient makes the go-redis client cfg describes. Every client has
// ContextTimeoutEnabled: a caller's deadline bounds the network reads and
// writes of its command, where go-redis otherwise waits ReadTimeout
// whatever the context says. A quorum Locker needs that of a server that
// accepts and never answers (a paused process): each server's wait must
// end at NodeTimeout, or the watchdog's renewals on the answering
// majority come too late and the lease lapses (TestQuorumServerPaused).
func newClient(c Config) redis.UniversalClient {
	switch {
	case c.Cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.Addrs, Username: c.Username, Password: c.Password, TLSConfig: c.TLS,
			DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
			PoolSize: c.PoolSize, ClusterStateReloadInterval: c.ClusterReload, ContextTimeoutEnabled: true, DisableIdentity: true,
		})
	case c.MasterName != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.MasterName, SentinelAddrs: c.Addrs, SentinelPassword: c.SentinelPassword,
			Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: c.TLS,
			DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
			PoolSize: c.PoolSize, ContextTimeoutEnabled: true, DisableIdentity: true,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: c.Addrs[0], Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: c.TLS,
		DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
		PoolSize: c.PoolSize, ContextTimeoutEnabled: true, DisableIdentity: true,
	})
}

func (s *Store) start(ctx context.Context) error {
	if err := s.checkTLS(ctx); err != nil {
		return err
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return &connectError{to: s.describe(), err: err}
	}
	if s.mini == nil {
		infos, err := s.Servers(ctx)
		if err != nil {
			return err
		}
		for _, in := range infos {
			s.log.Info().Str("addr", in.Addr).Str("run_id", in.RunID).Str("version", in.Version).
				Bool("aof", in.AOF).Str("maxmemory_policy", in.MaxmemoryPolicy).Msg("redis server")
			if !versionAtLeast(in.Version, 7) {
				return fmt.Errorf("store: %s runs Redis %s; syncd needs Redis 7.0 or newer (its scripts use SET with both NX and GET)", in.Addr, in.Version)
			}
			if s.cfg.RequirePersistence && !in.AOF {
				return fmt.Errorf("%w: %s runs without AOF (appendonly no): a restart would lose the item set and every claim; turn appendonly on, or leave redis.require_persistence off", ErrNoPersistence, in.Addr)
			}
			if in.MaxmemoryPolicy != "" && in.MaxmemoryPolicy != "noeviction" {
				if s.cfg.RefuseEviction {
					return fmt.Errorf("%w: %s has maxmemory-policy %s; set it to noeviction", ErrEviction, in.Addr, in.MaxmemoryPolicy)
				}
				s.log.Error().Str("addr", in.Addr).Str("maxmemory_policy", in.MaxmemoryPolicy).
					Msg("redis may evict claim keys under memory pressure: two owners could then sync one item; set maxmemory-policy noeviction")
			}
		}
	}
	if s.cfg.NoCreate {
		if err := s.readExisting(ctx); err != nil {
			return err
		}
	} else if err := s.create(ctx); err != nil {
		return err
	}
	if err := loadScripts(ctx, s.rdb); err != nil {
		return fmt.Errorf("store: load scripts: %w", err)
	}
	return nil
}

// create checks the deployment's shard count and reads its marker,
// writing either when it is missing.
func (s *Store) create(ctx context.Context) error {
	created, err := s.checkShards(ctx)
	if err != nil {
		return err
	}
	d, err := s.Deployment(ctx)
	if err != nil {
		return err
	}
	s.fresh, s.deployed = created && d.New, true
	switch {
	case s.fresh:
		s.deployAge = 0
	case d.New || d.Created.IsZero():
		s.deployAge = math.MaxInt64
	default:
		s.deployAge = d.Age
	}
	return nil
}

// readExisting is create for Config.NoCreate: it checks the shard count
// when there is one and reads the marker, writing nothing.
func (s *Store) readExisting(ctx context.Context) error {
	deployed, d, ok, err := s.readDeployed(ctx)
	if err != nil {
		return err
	}
	s.deployed = deployed
	s.deployAge = math.MaxInt64
	if ok && !d.Created.IsZero() {
		s.deployAge = d.Age
	}
	return nil
}

// checkTLS refuses, at once, a TLS configuration pointed at a server that
// answers in plaintext. Left to go-redis, such a TLS handshake waits for
// a reply the server never sends (it reads the handshake as the start of
// a command) until the dial timeout, five times over: 25 s by default,
// ending in "context deadline exceeded". Sentinels are not probed: they
// may differ from the masters they name.
func (s *Store) checkTLS(ctx context.Context) error {
	if s.cfg.TLS == nil || s.cfg.MasterName != "" {
		return nil
	}
	for _, addr := range s.cfg.Addrs {
		if plaintextRedis(ctx, addr, min(s.cfg.DialTimeout, time.Second)) {
			return fmt.Errorf("store: connect to %s: redis.tls is on, but the server answers in plaintext on this port: use its tls-port, or turn TLS off", addr)
		}
	}
	return nil
}

// plaintextRedis reports whether addr answers a plaintext PING as Redis
// does (+PONG, or an error such as -NOAUTH). A TLS port answers with an
// alert or closes the connection.
func plaintextRedis(ctx context.Context, addr string, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}

// versionAtLeast reports whether a Redis version string ("7.0.15") has a
// major version of at least major. An unreadable version passes: the
// scripts then fail with Redis's own error if the server is too old.
func versionAtLeast(v string, major int) bool {
	head, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(head)
	return err != nil || n >= major
}

// EmbeddedAddr is what Addr returns for the embedded store.
const EmbeddedAddr = "embedded store"

// connectError is Open's first round trip failed: "store: connect to"
// the server, and the error, which names the address once. A dial error
// of Go's net package names it again (store: connect to 127.0.0.1:1:
// dial tcp 127.0.0.1:1: connect: connection refused); its text here
// leaves that out (dial tcp: connect: connection refused), as long as it
// is the address the store was given: one a host name resolved to
// stays. The error itself, a *net.OpError, is unwrapped as it is.
type connectError struct {
	to  string // describe()
	err error
}

func (e *connectError) Error() string {
	msg := e.err.Error()
	var op *net.OpError
	if errors.As(e.err, &op) && op.Addr != nil && strings.Contains(e.to, op.Addr.String()) {
		msg = strings.Replace(msg, " "+op.Addr.String()+": ", ": ", 1)
	}
	return "store: connect to " + e.to + ": " + msg
}

func (e *connectError) Unwrap() error { return e.err }

func (s *Store) describe() string {
	switch {
	case s.mini != nil:
		return EmbeddedAddr
	case s.cfg.Cluster:
		return "cluster " + strings.Join(s.cfg.Addrs, ",")
	case s.cfg.MasterName != "":
		return "sentinel master " + s.cfg.MasterName + " via " + strings.Join(s.cfg.Addrs, ",")
	}
	return s.cfg.Addrs[0]
}

// checkShards records the shard count when the deployment has none
// (created) and checks it otherwise.
func (s *Store) checkShards(ctx context.Context) (created bool, err error) {
	key := s.keys.ShardCount()
	created, err = s.rdb.SetNX(ctx, key, s.keys.Shards(), 0).Result()
	if err != nil {
		return false, fmt.Errorf("store: record shard count: %w", err)
	}
	v, err := s.shardCount(ctx)
	if err != nil {
		return false, err
	}
	if v != s.keys.Shards() {
		return false, fmt.Errorf("%w: configured %d, deployment %q has %d", ErrShardsMismatch, s.keys.Shards(), s.keys.Prefix(), v)
	}
	return created, nil
}

// shardCount reads the deployment's shard count (redis.Nil when there
// is none). A value that is no count names its key and what it holds
// (an outside trial read only `strconv.Atoi: parsing "banana"`).
func (s *Store) shardCount(ctx context.Context) (int, error) {
	key := s.keys.ShardCount()
	raw, err := s.rdb.Get(ctx, key).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return 0, err
		}
		if strings.Contains(err.Error(), "WRONGTYPE") {
			return 0, fmt.Errorf("store: %s, the deployment's shard count, is damaged: %s: set it to the deployment's count (redis.shards) with SET", key, wrongType)
		}
		return 0, fmt.Errorf("store: read shard count: %w", err)
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < 1 {
		shown := raw
		if len(shown) > 32 {
			shown = shown[:32] + "..."
		}
		return 0, fmt.Errorf("store: %s, the deployment's shard count, holds %q, not a count: set it to the deployment's count (redis.shards)", key, shown)
	}
	return v, nil
}

// Restored writes the deployment's shard count again after Redis lost
// its data (see Deployment).
func (s *Store) Restored(ctx context.Context) error {
	_, err := s.checkShards(ctx)
	return err
}

// Servers reads INFO from every master (one unless Cluster). The
// embedded store reports none.
func (s *Store) Servers(ctx context.Context) ([]ServerInfo, error) {
	if s.mini != nil {
		return nil, nil
	}
	var (
		mu  sync.Mutex
		out []ServerInfo
	)
	read := func(ctx context.Context, c *redis.Client) error {
		text, err := c.Info(ctx, "server", "persistence", "memory").Result()
		if err != nil {
			return fmt.Errorf("store: INFO from %s: %w", c.Options().Addr, err)
		}
		in := parseInfo(text)
		in.Addr = c.Options().Addr
		mu.Lock()
		out = append(out, in)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func parseInfo(text string) ServerInfo {
	var in ServerInfo
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			in.RunID = v
		case "redis_version":
			in.Version = v
		case "uptime_in_seconds":
			in.UptimeSeconds, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			in.MaxmemoryPolicy = v
		case "aof_enabled":
			in.AOF = v == "1"
		case "used_memory":
			in.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory":
			in.Maxmemory, _ = strconv.ParseInt(v, 10, 64)
		case "mem_not_counted_for_evict":
			in.NotCountedForEvict, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return in
}

// driveClock makes keys of the embedded store expire in real time:
// miniredis only expires keys when told that time has passed.
func (s *Store) driveClock() {
	defer close(s.clockDone)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stopClock:
			return
		case now := <-t.C:
			s.mini.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Close closes the auto-pipeliner (its queued commands are sent first),
// the client, and stops the embedded store. Calls after the first return
// redis.ErrClosed, as go-redis's Close does.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return redis.ErrClosed
	}
	var err error
	if s.ap != nil {
		err = s.ap.Close()
	}
	err = errors.Join(err, s.rdb.Close())
	if s.lockB != nil {
		// Lock and Unlock calls still queued fail at once on the closed
		// client; wait for whoever is sending them, and refuse new ones.
		s.lockB.close()
	}
	if s.mini != nil {
		close(s.stopClock)
		<-s.clockDone
		s.mini.Close()
	}
	return err
}

// Keys returns the key builder.
func (s *Store) Keys() Keys { return s.keys }

// Embedded reports whether this is the embedded in-process store.
func (s *Store) Embedded() bool { return s.mini != nil }

// Client returns the underlying go-redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Addr describes where the store is, without credentials.
func (s *Store) Addr() string { return s.describe() }

// nodeFor returns a client bound to the master that serves key: the whole
// client for a single server or Sentinel, one node's client on a Cluster.
// WAIT must run on the connection that wrote, so a pipeline on this client
// carries both.
func (s *Store) nodeFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return s.rdb, nil
}

// runScript runs a script with EVALSHA and falls back to EVAL when the
// server lost its script cache.
func (s *Store) runScript(ctx context.Context, c redis.Scripter, sc *redis.Script, keys []string, args ...any) (any, error) {
	return sc.Run(ctx, c, keys, args...).Result()
}

// runHot runs one of the hot scripts (lock, unlock, claims, extend,
// release): through the auto-pipeliner when Config.AutoPipeline and
// another hot call is in flight, else as runScript on the client. A lone
// caller gains nothing from the pipeliner and pays its hand-offs between
// goroutines: one EVALSHA at a time ran at 13k/s through it against 29k to
// 43k/s straight (the 64-caller figures: 230k to 260k/s against 42k to
// 52k). The auto-pipeliner runs a queued command on its own context; the
// wait for it ends with ctx, as a quorum Locker's NodeTimeout needs (the
// command may still run, as after a timeout).
func (s *Store) runHot(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	n := s.hotCalls.Add(1)
	defer s.hotCalls.Add(-1)
	if s.ap == nil || n == 1 {
		return sc.Run(ctx, s.rdb, keys, args...).Result()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, "evalsha", sc.Hash(), len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	argv = append(argv, args...)
	cmd := redis.NewCmd(ctx, argv...)
	if err := s.ap.Submit(ctx, cmd).WaitContext(ctx); err != nil {
		if isNoScript(err) {
			// The server lost its script cache (a restart, a failover):
			// EVALSHA, then EVAL, on the client.
			return sc.Run(ctx, s.rdb, keys, args...).Result()
		}
		return nil, err
	}
	return cmd.Val(), nil
}

// ints converts a script's integer array reply.
func ints(v any, want int) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("store: unexpected script reply %T", v)
	}
	if want >= 0 && len(arr) != want {
		return nil, fmt.Errorf("store: script replied %d values, want %d", len(arr), want)
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("store: unexpected script value %T", x)
		}
		out[i] = n
	}
	return out, nil
}

// IsUnreachable reports an error of a call that did not reach its
// server, or got no reply in time: a connection refused, cut or timed
// out. A reply that is an error (a redirection, a failover's passing
// state) is not: the server answered.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connection refused")
}

// IsUnavailable reports whether err means Redis could not be reached or
// did not answer in time (IsUnreachable), or answered that it cannot
// serve now (loading, a failover under way), as opposed to a reply
// saying no.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, ErrDamaged) {
		return false
	}
	if IsUnreachable(err) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "i/o timeout", "connection refused", "EOF"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
