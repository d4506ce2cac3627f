package fault

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// fleetOpts sizes a fleet. Zero fields take the defaults in brackets.
type fleetOpts struct {
	Prefix      string        // key prefix, also names the log directory
	Daemons     int           // [3] syncd run processes
	Workers     int           // [3] engine.workers of each
	Fast        int           // items held Sync by the checker
	Slow        int           // items held SlowSync by the checker
	TTL         time.Duration // [2s] ownership.ttl; margin takes its default
	Heartbeat   time.Duration // [ttl/3] ownership.heartbeat
	Settle      time.Duration // ownership.settle
	Interval    time.Duration // [1s] engine.interval
	Sync        time.Duration // [500ms] how long the checker holds a fast item
	SlowSync    time.Duration // [3s] how long it holds a slow item
	ReadTimeout time.Duration // [1s] redis.read_timeout (and write_timeout)
	AOF         bool          // appendonly yes
	Proxy       bool          // each daemon reaches Redis through its own proxy
	Watch       bool          // sample claim records for leaks
	// Hold, when set, is the checker's sync duration per item instead of
	// Sync and SlowSync.
	Hold func(id string) time.Duration
}

const (
	shards     = 4
	poisonID   = "poison"
	syncSlack  = 2 * time.Second // added to every recovery bound
	pollEvery  = 20 * time.Millisecond
	warmWithin = 30 * time.Second
)

func (o *fleetOpts) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Daemons == 0 {
		o.Daemons = 3
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	def(&o.TTL, 2*time.Second)
	def(&o.Interval, time.Second)
	def(&o.Sync, 500*time.Millisecond)
	def(&o.SlowSync, 3*time.Second)
	def(&o.ReadTimeout, time.Second)
	def(&o.Heartbeat, (o.TTL / 3).Round(time.Millisecond))
}

// margin is syncd's default for the fleet's ttl.
func (o *fleetOpts) margin() time.Duration { return o.TTL/10 + 2*time.Millisecond }

// params describes the fleet for the report.
func (o *fleetOpts) params() string {
	s := fmt.Sprintf("ttl %v (heartbeat %v, margin %v), interval %v, %d daemons × %d workers, %d items synced in %v",
		o.TTL, o.Heartbeat, o.margin(), o.Interval, o.Daemons, o.Workers, o.Fast, o.Sync)
	if o.Slow > 0 {
		s += fmt.Sprintf(" + %d in %v", o.Slow, o.SlowSync)
	}
	s += " + 1 poison item (quarantined)"
	if o.Settle > 0 {
		s += fmt.Sprintf(", settle %v", o.Settle)
	}
	s += fmt.Sprintf(", redis.read_timeout %v", o.ReadTimeout)
	if o.AOF {
		s += ", appendonly yes (everysec)"
	}
	if o.Proxy {
		s += ", each daemon behind its own TCP proxy"
	}
	return s
}

// fleet is one Redis, one checker and Daemons syncd processes.
type fleet struct {
	t       *testing.T
	o       fleetOpts
	srv     *redistest.Server
	rdb     *redis.Client // direct, short timeouts: for reading state
	keys    store.Keys
	chk     *checker
	proxies []*proxy
	dir     string // configs and daemon logs; kept when the test fails
	admin   string // config for admin commands, straight to Redis

	ids    []string // every item
	normal []string // every item but the poison one

	mu      sync.Mutex
	daemons []*daemon // current incarnation per slot
	incs    []int

	watch *watcher
	// wiped: the scenario throws Redis's data away, so what the sink is
	// told of an item's last sync may go back.
	wiped bool
}

func newFleet(t *testing.T, o fleetOpts) *fleet {
	t.Helper()
	o.defaults()
	f := &fleet{t: t, o: o, keys: store.NewKeys(o.Prefix, shards), incs: make([]int, o.Daemons), daemons: make([]*daemon, o.Daemons)}
	for i := range o.Fast {
		f.normal = append(f.normal, fmt.Sprintf("item-%02d", i))
	}
	for i := range o.Slow {
		f.normal = append(f.normal, fmt.Sprintf("slow-%d", i))
	}
	f.ids = append(append([]string(nil), f.normal...), poisonID)

	dir, err := os.MkdirTemp("", "syncd-fault-"+o.Prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	f.dir = dir
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon configs and logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})

	f.chk = newChecker(t, f.hold, poisonID)
	f.srv = redistest.Start(t, &redistest.Options{AOF: o.AOF})
	f.rdb = redis.NewClient(&redis.Options{Addr: f.srv.Addr(), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { f.rdb.Close() })
	f.admin = f.writeConfig("admin", f.srv.Addr())
	if o.Proxy {
		for range o.Daemons {
			f.proxies = append(f.proxies, newProxy(t, f.srv.Addr()))
		}
	}
	if o.Watch {
		f.watch = newWatcher(f)
	}
	start := time.Now()
	for slot := range o.Daemons {
		f.start(slot)
	}
	t.Cleanup(func() {
		if t.Failed() {
			f.dumpLogs()
		}
	})
	// Warm: every item synced once and the poison item quarantined. A
	// fresh Redis holds claims off for one ttl.
	if _, stranded := f.awaitSynced(start, warmWithin); len(stranded) > 0 {
		t.Fatalf("fleet never synced %v", stranded)
	}
	f.waitFor(warmWithin, "the poison item quarantined", func() bool {
		st, err := f.state()
		return err == nil && st[poisonID].Quarantined
	})
	return f
}

// hold is the checker's sync duration per item.
func (f *fleet) hold(id string) time.Duration {
	if f.o.Hold != nil {
		return f.o.Hold(id)
	}
	if strings.HasPrefix(id, "slow-") {
		return f.o.SlowSync
	}
	return f.o.Sync
}

// bound is how long after a fault ends an item may take to have an
// accepted write again: its lease expiring, its interval, two syncs
// (one queued ahead of it on the worker), plus slack.
func (f *fleet) bound(id string, extra time.Duration) time.Duration {
	return extra + f.o.TTL + f.o.Interval + 2*f.hold(id) + syncSlack
}

func (f *fleet) writeConfig(host, addr string) string {
	ids := make([]string, len(f.ids))
	for i, id := range f.ids {
		ids[i] = strconv.Quote(id)
	}
	body := fmt.Sprintf(`redis:
  addrs: [%q]
  key_prefix: %s
  shards: %d
  dial_timeout: 1s
  read_timeout: %v
  write_timeout: %v
ownership:
  ttl: %v
  heartbeat: %v
  settle: %v
  owner: %s
engine:
  workers: %d
  interval: %v
  poll: 50ms
  backoff_min: 200ms
  backoff_max: 2s
  drain_timeout: 1s
items:
  ids: [%s]
sink:
  type: http
  http:
    url: %s
    timeout: 1m
log:
  format: json
  level: info
`, addr, f.o.Prefix, shards, f.o.ReadTimeout, f.o.ReadTimeout, f.o.TTL, f.o.Heartbeat, f.o.Settle, host,
		f.o.Workers, f.o.Interval, strings.Join(ids, ", "), f.chk.URL())
	p := filepath.Join(f.dir, host+".yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// daemon is one `syncd run` process.
type daemon struct {
	slot int
	host string // ownership.owner: d<slot>.<incarnation>
	log  string
	proc *testutil.Process
}

// start starts a new incarnation of the daemon in slot.
func (f *fleet) start(slot int) *daemon {
	f.t.Helper()
	f.mu.Lock()
	inc := f.incs[slot]
	f.incs[slot]++
	f.mu.Unlock()
	host := fmt.Sprintf("d%d.%d", slot, inc)
	addr := f.srv.Addr()
	if f.proxies != nil {
		addr = f.proxies[slot].Addr()
	}
	cfg := f.writeConfig(host, addr)
	d := &daemon{slot: slot, host: host, log: filepath.Join(f.dir, host+".log")}
	out, err := os.Create(d.log)
	if err != nil {
		f.t.Fatal(err)
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(syncd.Path(f.t), "run", "-c", cfg)
	cmd.Stdout, cmd.Stderr = out, out
	if d.proc, err = testutil.Spawn(cmd); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		if err := d.kill(); err != nil {
			f.t.Error(err)
		}
	})
	f.mu.Lock()
	f.daemons[slot] = d
	f.mu.Unlock()
	return d
}

func (f *fleet) daemon(slot int) *daemon {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.daemons[slot]
}

func (d *daemon) exited() bool { return d.proc.Exited() }

// kill sends SIGKILL (after SIGCONT, so nothing stays stopped) and reaps.
func (d *daemon) kill() error {
	if err := d.proc.Kill(); err != nil {
		return fmt.Errorf("daemon %s: %w", d.host, err)
	}
	return nil
}

// pause sends SIGSTOP and waits until the kernel shows it stopped.
func (d *daemon) pause(t *testing.T) {
	t.Helper()
	if err := d.proc.Pause(); err != nil {
		t.Fatalf("daemon %s: %v", d.host, err)
	}
}

// resume sends SIGCONT and waits until it runs again.
func (d *daemon) resume(t *testing.T) {
	t.Helper()
	if err := d.proc.Resume(); err != nil {
		t.Fatalf("daemon %s: %v", d.host, err)
	}
}

// logSize is the current length of the daemon's log, to count from.
func (d *daemon) logSize() int64 {
	st, err := os.Stat(d.log)
	if err != nil {
		return 0
	}
	return st.Size()
}

// countLog counts the daemon's log messages from offset on, by message.
func (d *daemon) countLog(from int64) map[string]int {
	out := map[string]int{}
	fh, err := os.Open(d.log)
	if err != nil {
		return out
	}
	defer fh.Close()
	if _, err := fh.Seek(from, io.SeekStart); err != nil {
		return out
	}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Message != "" {
			out[m.Message]++
		}
	}
	return out
}

// Log messages of syncd that the scenarios count.
const (
	msgLost         = "lease lost during sync: cancelled, not recorded"
	msgUnrecorded   = "synced, but the lease ended first: not recorded"
	msgStale        = "sink rejected the fence: a newer claim wrote first"
	msgNotConfirmed = "claim not confirmed after settle"
	msgUnknown      = "claim reply lost; confirming"
	msgHeldOff      = "shard held off: no claims until every lease from before could have expired (redis lost its data, or the deployment is new)"
	msgDataLoss     = "redis lost its data: the item set was restored from the sources; items in no source (added by hand) are gone; claims wait one ttl"
)

// checkAlive fails the test for every daemon of the fleet that exited
// without being told to.
func (f *fleet) checkAlive() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.daemons {
		if d.exited() {
			f.t.Errorf("daemon %s exited by itself (%v); log %s:\n%s", d.host, d.proc.State(), d.log, tail(d.log, 30))
		}
	}
}

func (f *fleet) dumpLogs() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.daemons {
		f.t.Logf("--- %s (last 20 lines of %s)\n%s", d.host, d.log, tail(d.log, 20))
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return testutil.Tail(string(b), n)
}

// cli runs a syncd admin command against Redis directly.
func (f *fleet) cli(args ...string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, syncd.Path(f.t), slices.Concat(args, []string{"-c", f.admin})...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("syncd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (f *fleet) waitFor(within time.Duration, what string, cond func() bool) {
	f.t.Helper()
	testutil.WaitFor(f.t, within, pollEvery, what, cond)
}

// awaitSynced waits until every normal item has an accepted write that
// began at or after since, or until its bound (plus extra) has passed.
// It returns, per item synced in time, how long after since that write
// began, and the items that were not synced within their bound.
func (f *fleet) awaitSynced(since time.Time, extra time.Duration) (map[string]time.Duration, []string) {
	longest := time.Duration(0)
	for _, id := range f.normal {
		longest = max(longest, f.bound(id, extra))
	}
	var got map[string]write
	for {
		got = f.chk.firstAccepted(f.normal, since)
		if len(got) == len(f.normal) || time.Since(since) > longest {
			break
		}
		time.Sleep(pollEvery)
	}
	rec := map[string]time.Duration{}
	var stranded []string
	for _, id := range f.normal {
		w, ok := got[id]
		if !ok || w.End.Sub(since) > f.bound(id, extra) {
			stranded = append(stranded, id)
			continue
		}
		rec[id] = w.Begin.Sub(since)
	}
	return rec, stranded
}

// itemState is one item as stored in Redis.
type itemState struct {
	Present     bool // in the due index
	Quarantined bool // score +inf
	Fence       uint64
	LastSyncMs  int64
	Attempts    int
	Record      *store.Record // the claim record, nil when unclaimed
	RecordTTL   time.Duration
}

// state reads every item straight from Redis (one pipeline).
func (f *fleet) state() (map[string]itemState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pipe := f.rdb.Pipeline()
	type cmds struct {
		score *redis.FloatCmd
		meta  *redis.StringCmd
		rec   *redis.StringCmd
		pttl  *redis.DurationCmd
	}
	all := make([]cmds, len(f.ids))
	for i, id := range f.ids {
		sh := f.keys.Shard(id)
		all[i] = cmds{pipe.ZScore(ctx, f.keys.Due(sh), id), pipe.HGet(ctx, f.keys.Meta(sh), id),
			pipe.Get(ctx, f.keys.Record(sh, id)), pipe.PTTL(ctx, f.keys.Record(sh, id))}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := map[string]itemState{}
	for i, id := range f.ids {
		var s itemState
		c := all[i]
		if score, err := c.score.Result(); err == nil {
			s.Present = true
			s.Quarantined = math.IsInf(score, 1)
		}
		if meta, err := c.meta.Result(); err == nil {
			if len(meta) < 14 {
				return nil, fmt.Errorf("meta of %s: %q", id, meta)
			}
			s.Fence, s.LastSyncMs, s.Attempts = store.ParseMeta(meta)
		}
		if b, err := c.rec.Bytes(); err == nil {
			r, err := store.UnmarshalRecord(b)
			if err != nil {
				return nil, fmt.Errorf("record of %s: %w", id, err)
			}
			s.Record = r
			s.RecordTTL = c.pttl.Val()
		}
		out[id] = s
	}
	return out, nil
}

func (f *fleet) mustState() map[string]itemState {
	f.t.Helper()
	st, err := f.state()
	if err != nil {
		f.t.Fatalf("read state from redis: %v", err)
	}
	return st
}

// awaitAOFWritten waits (at most 5 s) until Redis's AOF buffer is empty:
// everything it acknowledged so far is then in the file, which a kill -9
// of the process does not lose. With appendfsync everysec Redis holds
// writes back, acknowledged, for up to 2 s while a slow fsync runs (a
// busy disk, as under the whole test suite).
func (f *fleet) awaitAOFWritten() {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := f.rdb.Info(ctx, "persistence").Result()
		cancel()
		if err == nil && strings.Contains(info, "aof_buffer_length:0\r\n") {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("redis's AOF buffer not written after 5s (%v): %s", err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lostAcks compares two states read from Redis, before and after a
// fault: nothing acknowledged before may be missing after (invariant 4).
func lostAcks(pre, post map[string]itemState) []string {
	var out []string
	for id, a := range pre {
		b := post[id]
		switch {
		case a.Present && !b.Present:
			out = append(out, id+": gone from the item set")
		case b.LastSyncMs < a.LastSyncMs:
			out = append(out, fmt.Sprintf("%s: lastSync went back from %d to %d", id, a.LastSyncMs, b.LastSyncMs))
		case b.Fence < a.Fence:
			out = append(out, fmt.Sprintf("%s: fence went back from %d to %d", id, a.Fence, b.Fence))
		case a.Quarantined && !b.Quarantined:
			out = append(out, id+": no longer quarantined")
		}
	}
	return out
}

// watcher samples every claim record a few times per ttl to find records
// that live on while no write of theirs is running (leaked claims).
type watcher struct {
	f    *fleet
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	seen map[recKey]*recSeen
	bad  []string // records without an expiry, or one above ttl
}

type recKey struct {
	id    string
	fence uint64
}

type recSeen struct {
	host        string
	first, last time.Time
	touch       time.Time // latest claim or heartbeat time in the record (Redis clock)
}

func newWatcher(f *fleet) *watcher {
	w := &watcher{f: f, stop: make(chan struct{}), done: make(chan struct{}), seen: map[recKey]*recSeen{}}
	go w.run()
	f.t.Cleanup(func() {
		close(w.stop)
		<-w.done
	})
	return w
}

func (w *watcher) run() {
	defer close(w.done)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		st, err := w.f.state()
		if err != nil {
			continue
		}
		now := time.Now()
		w.mu.Lock()
		for id, s := range st {
			if s.Record == nil {
				continue
			}
			if s.RecordTTL < 0 || s.RecordTTL > w.f.o.TTL {
				w.bad = append(w.bad, fmt.Sprintf("record of %s (fence %d) has pttl %v", id, s.Record.Fence, s.RecordTTL))
			}
			k := recKey{id, s.Record.Fence}
			r, ok := w.seen[k]
			if !ok {
				r = &recSeen{host: s.Record.Owner.Host, first: now}
				w.seen[k] = r
			}
			r.last = now
			if s.Record.HeartbeatAt.After(r.touch) {
				r.touch = s.Record.HeartbeatAt
			}
		}
		w.mu.Unlock()
	}
}

// orphan is a claim record seen while none of its writes ran.
type orphan struct {
	lived     time.Duration // from its last write's end (or its first sighting) to its last sighting
	untouched time.Duration // from its last claim or heartbeat to its last sighting
}

// orphans returns the records seen after since that lived on with none
// of their writes in flight, and the bad expiries seen since the last
// call.
func (w *watcher) orphans(since time.Time, ws []write) (map[recKey]orphan, []string) {
	type span struct {
		lastEnd  time.Time
		inFlight bool
	}
	spans := map[recKey]*span{}
	for _, x := range ws {
		k := recKey{x.ID, x.Fence}
		s := spans[k]
		if s == nil {
			s = &span{}
			spans[k] = s
		}
		if x.Outcome == inFlight {
			s.inFlight = true
		} else if x.End.After(s.lastEnd) {
			s.lastEnd = x.End
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[recKey]orphan{}
	for k, r := range w.seen {
		if r.last.Before(since) {
			continue
		}
		ref := r.first
		if s := spans[k]; s != nil {
			if s.inFlight {
				continue
			}
			if s.lastEnd.After(ref) {
				ref = s.lastEnd
			}
		}
		if d := r.last.Sub(ref); d > 0 {
			touched := ref
			if r.touch.After(touched) {
				touched = r.touch
			}
			out[k] = orphan{lived: d, untouched: r.last.Sub(touched)}
		}
	}
	bad := w.bad
	w.bad = nil
	return out, bad
}
