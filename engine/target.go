package engine

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// Defaults of TargetConfig.
const (
	BreakerFailuresDefault = 5
	ProbeIntervalDefault   = time.Second
	BreakerWindowDefault   = 10 * time.Minute
)

// TargetConfig is what the engine knows of the target: its limits and
// its breaker. They hold fleet-wide: their state is in Redis, shared by
// every daemon and batch run of the deployment. The zero value has no
// limits and the breaker on with its defaults.
type TargetConfig struct {
	// Rate limits how many syncs start per period (GCRA). Zero: no limit.
	Rate Rate
	// Burst is how many syncs may start at once after a quiet spell.
	// Default: one second's worth of Rate, at least 1.
	Burst int
	// MaxInFlight caps the syncs running against the target at once.
	// Each holds a permit, a lease in Redis heartbeated like a claim, so
	// a killed daemon's permits come back within one ttl. 0: no cap.
	MaxInFlight int
	// Breaker is the target's circuit breaker.
	Breaker BreakerConfig
}

// BreakerConfig configures the target's circuit breaker. It opens on a
// target failure (sinks.Unavailable, sinks.RetryAfter: an http 503, an
// exec exit 75), and on unclassified or permanent failures of Failures
// distinct items with no success between them (one poison item failing
// alone never opens it). A permanent failure quarantines its item only
// when the item failed before and, since, another item succeeded or
// none failed: till then it is counted as an unclassified one, so that
// a target refusing every item (an expired token's 401) opens the
// breaker and quarantines none. While it is open no sync starts and no
// attempt is counted against any item: items keep their place in line. The fleet sends one
// probe sync per ProbeInterval, or after a target's Retry-After; the
// first success closes it.
type BreakerConfig struct {
	// Disabled turns the breaker off: a target failure is then retried
	// with backoff (not counted against the item), and an unclassified
	// one counts as before.
	Disabled bool
	// Failures is how many distinct items failing with no success
	// between them open the breaker. Default BreakerFailuresDefault (5);
	// at least 2.
	Failures int
	// ProbeInterval is the time between two probe syncs of an open
	// breaker, fleet-wide. Default ProbeIntervalDefault (1s); at least
	// 10ms.
	ProbeInterval time.Duration
	// Window is how long an unclassified failure is remembered when no
	// success follows. Default BreakerWindowDefault (10m).
	Window time.Duration
}

// configured reports whether the engine keeps any state of the target:
// a breaker, a rate limit or max_in_flight.
func (c TargetConfig) configured() bool {
	return !c.Breaker.Disabled || c.Rate.N > 0 || c.MaxInFlight > 0
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c TargetConfig) WithDefaults() TargetConfig {
	if c.Burst == 0 && c.Rate.N > 0 {
		c.Burst = max(1, int(c.Rate.PerSecond()))
	}
	if c.Breaker.Failures == 0 {
		c.Breaker.Failures = BreakerFailuresDefault
	}
	if c.Breaker.ProbeInterval == 0 {
		c.Breaker.ProbeInterval = ProbeIntervalDefault
	}
	if c.Breaker.Window == 0 {
		c.Breaker.Window = BreakerWindowDefault
	}
	return c
}

func (c TargetConfig) validate(bad func(field, format string, args ...any)) {
	if err := c.Rate.validate(); err != nil {
		bad("target.rate", "%v", err)
	}
	if c.Burst < 0 || c.Burst > 1_000_000 {
		bad("target.burst", "%d is outside 1..1000000", c.Burst)
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > 1_000_000 {
		bad("target.max_in_flight", "%d is outside 0..1000000", c.MaxInFlight)
	}
	if c.Breaker.Failures < 2 {
		bad("target.breaker.failures", "%d is below 2: one item failing alone must never open the breaker", c.Breaker.Failures)
	}
	if c.Breaker.ProbeInterval < 10*time.Millisecond {
		bad("target.breaker.probe_interval", "%v is below 10ms", c.Breaker.ProbeInterval)
	}
	if c.Breaker.Window < c.Breaker.ProbeInterval {
		bad("target.breaker.window", "%v is below probe_interval (%v)", c.Breaker.Window, c.Breaker.ProbeInterval)
	}
}

// targetStore is what the target needs from the store; *store.Store
// implements it.
type targetStore interface {
	TargetAdmit(ctx context.Context, p store.AdmitParams) (store.Admission, error)
	TargetReport(ctx context.Context, p store.ReportParams) (store.Report, error)
	TargetExtend(ctx context.Context, permits []string, ttl time.Duration) (int, error)
	TargetRelease(ctx context.Context, permits ...string) error
	TargetState(ctx context.Context) (store.TargetState, error)
}

// target gates the claim rounds on the target's limits and breaker, and
// tells the breaker how syncs end. A nil *target gates nothing (engines
// over a fake store in tests).
//
// A round that finds what it needs here costs no round trip: the
// permits of syncs that ended are kept for the next syncs (they are
// held in Redis and extended all the same), and rate tokens are taken a
// little ahead. Either is used only while the breaker is closed as this
// process last saw it, as without limits (watch reads it every 200 ms;
// a failure this process reports, at once). Otherwise the round asks
// Redis (admit), which decides the breaker's probe: a probe is never
// taken ahead. Permits kept but not used for a whole watch period are
// given back, and so are all at Stop.
type target struct {
	st   targetStore
	cfg  TargetConfig
	ttl  time.Duration // a permit's lease: the claim TTL
	beat time.Duration // how often permits are extended
	base string        // permit names: base#seq:i
	log  zerolog.Logger
	m    *Metrics
	now  func() int64 // Redis's clock, estimated
	seq  atomic.Uint64

	mu      sync.Mutex
	view    store.BreakerState
	suspect bool          // unclassified failures may be pending: a success reports
	downAt  time.Time     // when this process saw the breaker open; zero: closed
	downFor time.Duration // how long it saw it open before downAt
	// permits are those held in Redis, which watch extends; those also
	// in stale were held when some were found gone, so they are given
	// back when their syncs end, not kept.
	permits map[string]struct{}
	stale   map[string]struct{}
	// sure is until when every permit held surely is in Redis (the send
	// time of the call that last took or extended it, plus ttl, less a
	// tenth for clock drift); added counts permits taken, so that an
	// extend knows whether some came meanwhile, which it did not cover.
	// Past sure (this process stalled, say), kept permits are given
	// back, not used: another daemon may hold their places.
	sure  time.Time
	added int
	// idle are held permits no sync uses, most recently kept last; the
	// fewest there were since the last watch tick (idleLow) are given
	// back at the next one.
	idle    []string
	idleLow int
	// tokens are rate tokens taken ahead, usable until tokensBy; used
	// counts those used since the last were taken, to size the next take.
	tokens   int
	tokensBy time.Time
	used     int
	// back holds permits given back and not yet sent; one flush at a
	// time sends what gathered meanwhile (a group commit), so a busy
	// fleet pays one ZREM per many syncs, not one per sync.
	back     []string
	flushing bool
	flushed  sync.WaitGroup
}

// aheadFor is how long rate tokens taken ahead may be used: Redis
// charges them as if taken that much later (see store.AdmitParams), and
// what is left then lapses.
const aheadFor = 50 * time.Millisecond

// grant is what a claim round may start: n syncs, each with one of
// permits (with max_in_flight); probe when it is the breaker's probe.
type grant struct {
	n       int
	probe   bool
	permits []string
	wait    time.Duration // n == 0: when to ask again
}

// take hands out the next permit ("" without max_in_flight).
func (g *grant) take() string {
	if len(g.permits) == 0 {
		return ""
	}
	p := g.permits[0]
	g.permits = g.permits[1:]
	return p
}

func (t *target) limited() bool { return t.cfg.Rate.N > 0 || t.cfg.MaxInFlight > 0 }

// admit says how many of n syncs may start. Without limits, and with
// the breaker closed as this process last saw it, that costs no round
// trip; with limits, neither does a round the permits and tokens kept
// here cover.
func (t *target) admit(ctx context.Context, n int) (grant, error) {
	if t == nil {
		return grant{n: n}, nil
	}
	t.mu.Lock()
	open, next := t.view.Open && !t.cfg.Breaker.Disabled, t.view.Next
	t.mu.Unlock()
	switch {
	case !t.limited() && !open:
		return grant{n: n}, nil
	case open && !t.limited():
		if wait := next - t.now(); wait > 0 {
			return grant{wait: time.Duration(wait) * time.Millisecond}, nil
		}
	case !open:
		if g, ok := t.local(n); ok {
			return g, nil
		}
	}
	return t.ask(ctx, n)
}

// local grants n syncs from the permits and tokens kept here, if they
// cover them all.
func (t *target) local(n int) (grant, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cfg.MaxInFlight > 0 && (len(t.idle) < n || !time.Now().Before(t.sure)) ||
		t.cfg.Rate.N > 0 && (t.tokens < n || !time.Now().Before(t.tokensBy)) {
		return grant{}, false
	}
	g := grant{n: n}
	if t.cfg.Rate.N > 0 {
		t.tokens -= n
	}
	if t.cfg.MaxInFlight > 0 {
		g.permits = t.takeIdle(n)
	}
	t.used += n
	return g, true
}

// ask asks Redis for n syncs, bringing the permits and tokens kept here
// towards them, and takes rate tokens ahead for the next rounds: twice
// what this process used of the last ones, at most aheadFor's worth,
// and none when aheadFor holds fewer than two. At a rate whose
// interval is aheadFor or longer (20/s and below), a token taken ahead
// fills a whole interval of the fleet's rate and lapses unused unless a
// round comes within aheadFor: tests/target's fleet of three at 20/s
// then ran 16.0/s in about one run of three, and 20.0/s in every run
// since.
func (t *target) ask(ctx context.Context, n int) (grant, error) {
	p := store.AdmitParams{N: n, Breaker: !t.cfg.Breaker.Disabled, ProbeEvery: t.cfg.Breaker.ProbeInterval,
		MaxInFlight: t.cfg.MaxInFlight, TTL: t.ttl, Every: t.cfg.Rate.every(), Burst: t.cfg.Burst, AheadFor: aheadFor}
	sent := time.Now() // tokens taken ahead lapse aheadFor after this, before Redis's aheadFor
	t.mu.Lock()
	var held, unsure []string
	if t.cfg.MaxInFlight > 0 {
		p.Base = t.base + "#" + strconv.FormatUint(t.seq.Add(1), 10)
		if !sent.Before(t.sure) {
			unsure = t.takeIdle(len(t.idle))
		}
		held = t.takeIdle(min(n, len(t.idle)))
		p.HeldPermits = len(held)
	}
	by := t.tokensBy
	if t.cfg.Rate.N > 0 {
		if sent.Before(by) {
			p.HeldTokens = min(n, t.tokens)
		}
		t.tokens -= p.HeldTokens
		if fit := int(aheadFor / p.Every); fit >= 2 {
			p.Ahead = min(max(2*t.used, n), fit)
		}
	}
	t.mu.Unlock()
	t.release(unsure...)
	a, err := t.st.TargetAdmit(ctx, p)
	if err != nil {
		a = store.Admission{}
	}
	granted := a.Granted
	if t.cfg.MaxInFlight > 0 {
		granted = min(granted, len(held)+len(a.Permits))
	}
	t.mu.Lock()
	// Put back what the grant did not use: the permits, and the tokens
	// unless others replaced them meanwhile (their time runs out sooner).
	t.putIdle(held[min(granted, len(held)):]...)
	if t.tokensBy == by {
		t.tokens += p.HeldTokens - min(granted, p.HeldTokens)
	}
	if a.Ahead > 0 {
		t.tokens, t.tokensBy, t.used = a.Ahead, sent.Add(aheadFor), 0
	}
	t.used += granted
	if len(a.Permits) > 0 {
		if until := sent.Add(t.ttl * 9 / 10); len(t.permits) == 0 || until.Before(t.sure) {
			t.sure = until
		}
		t.added += len(a.Permits)
	}
	for _, pm := range a.Permits {
		t.permits[pm] = struct{}{}
	}
	t.mu.Unlock()
	if err != nil {
		return grant{}, err
	}
	t.see(a.Breaker)
	if a.Granted == 0 {
		t.m.TargetWaits.Add(1)
	}
	if a.Probe {
		t.m.TargetProbes.Add(1)
	}
	return grant{n: granted, probe: a.Probe, permits: append(held[:min(granted, len(held))], a.Permits...), wait: a.Wait}, nil
}

// takeIdle takes n kept permits, the most recently kept first; t.mu is
// held.
func (t *target) takeIdle(n int) []string {
	if n == 0 {
		return nil
	}
	ps := slices.Clone(t.idle[len(t.idle)-n:])
	t.idle = t.idle[:len(t.idle)-n]
	t.idleLow = min(t.idleLow, len(t.idle))
	return ps
}

// putIdle keeps permits for the next rounds; t.mu is held.
func (t *target) putIdle(permits ...string) {
	t.idle = append(t.idle, permits...)
}

// done takes back permits whose syncs ended, or that a round did not
// use ("": none, without max_in_flight): they are kept for the next
// rounds, or given back when found gone once.
func (t *target) done(permits ...string) {
	if t == nil {
		return
	}
	var back []string
	t.mu.Lock()
	for _, p := range permits {
		_, held := t.permits[p]
		_, stale := t.stale[p]
		switch {
		case stale:
			back = append(back, p)
		case held:
			t.putIdle(p)
		}
	}
	t.mu.Unlock()
	t.release(back...)
}

// surplus gives back the permits kept that no round used since the last
// call (watch calls it every tick).
func (t *target) surplus() {
	t.mu.Lock()
	back := slices.Clone(t.idle[:t.idleLow])
	t.idle = slices.Delete(t.idle, 0, t.idleLow)
	t.idleLow = len(t.idle)
	t.mu.Unlock()
	t.release(back...)
}

// release gives back permits, which are sent by flush, batched with
// others given back meanwhile.
func (t *target) release(permits ...string) {
	if len(permits) == 0 {
		return
	}
	t.mu.Lock()
	for _, p := range permits {
		delete(t.permits, p)
		delete(t.stale, p)
	}
	t.back = append(t.back, permits...)
	start := !t.flushing
	t.flushing = true
	if start {
		t.flushed.Add(1)
	}
	t.mu.Unlock()
	if start {
		go t.flush()
	}
}

// flush sends the permits given back, batch after batch, until none is
// left.
func (t *target) flush() {
	defer t.flushed.Done()
	for {
		t.mu.Lock()
		batch := t.back
		t.back = nil
		if len(batch) == 0 {
			t.flushing = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := t.st.TargetRelease(ctx, batch...); err != nil {
			t.log.Warn().Err(err).Int("permits", len(batch)).Msg("release permits failed; they expire within one ttl")
		}
		cancel()
	}
}

// wait gives back the permits kept (Stop calls it once no sync runs)
// and waits for those given back to be sent.
func (t *target) wait() {
	if t == nil {
		return
	}
	t.mu.Lock()
	back := t.idle
	t.idle, t.idleLow = nil, 0
	t.mu.Unlock()
	t.release(back...)
	t.flushed.Wait()
}

// see takes in the breaker's state as Redis has it.
func (t *target) see(b store.BreakerState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case b.Open && !t.view.Open:
		t.downAt = time.Now()
		t.m.TargetUp.Store(0)
	case !b.Open && t.view.Open:
		t.downFor += time.Since(t.downAt)
		t.downAt = time.Time{}
		t.m.TargetUp.Store(1)
	}
	t.view = b
}

// downtime returns how long the breaker has been open as this process
// saw it: now, without a break (0 while it is closed), and in all.
func (t *target) downtime() (now, total time.Duration) {
	if t == nil {
		return 0, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.downAt.IsZero() {
		now = time.Since(t.downAt)
	}
	return now, t.downFor + now
}

// verdict is whose fault the breaker finds a failure.
type verdict int

const (
	// blameItem: an unclassified failure, or a permanent one the breaker
	// cannot yet tell from the target's: counted, backed off.
	blameItem verdict = iota
	// blameTarget: a target failure, or any failure while the breaker is
	// open: handed back, not counted.
	blameTarget
	// blameOwn: a permanent failure of an item that failed before, with
	// a success of the target since or failing alone: quarantined.
	blameOwn
)

// report tells the breaker how a sync ended and returns whose fault the
// failure is (see verdict); failed: the item's last attempt failed too.
// A permanent failure is the item's own at once only when the breaker is
// off; else only when the item failed before and, since, the target
// worked or no other item failed, for distinct items failing
// permanently with no success between them are the target's (an expired
// token's 401, a wrong path's 404): they open the breaker, as
// unclassified failures do. A success is sent
// only when the breaker is open or may have suspects, so a healthy
// target costs no round trip.
func (t *target) report(id string, class sinks.Class, after time.Duration, err error, failed bool) verdict {
	if t == nil || t.cfg.Breaker.Disabled {
		return blameOf(class, false, true)
	}
	p := store.ReportParams{ID: id, RetryAfter: after, ProbeEvery: t.cfg.Breaker.ProbeInterval,
		Failures: t.cfg.Breaker.Failures, Window: t.cfg.Breaker.Window, FailedBefore: failed}
	switch class {
	case sinks.ClassNone:
		t.mu.Lock()
		skip := !t.view.Open && !t.suspect
		t.mu.Unlock()
		if skip {
			return blameItem
		}
		p.Outcome = store.TargetOK
	case sinks.ClassTarget:
		p.Outcome = store.TargetFailed
	case sinks.ClassItem:
		p.Outcome = store.TargetItem
	case sinks.ClassPermanent:
		p.Outcome = store.TargetPermanent
	default:
		return blameItem
	}
	if err != nil {
		p.Reason = err.Error()
	}
	if class == sinks.ClassTarget {
		// A target failure opens the breaker (target_report.lua): this
		// process holds its syncs from now, not from the report's reply,
		// in whose round trip (70-100 ms under load) syncs of new claims
		// still started after a 429's Retry-After (an outside trial).
		now := t.now()
		t.mu.Lock()
		open := t.view.Open
		t.mu.Unlock()
		if !open {
			t.see(store.BreakerState{Open: true, Since: now, Next: now + max(after, t.cfg.Breaker.ProbeInterval).Milliseconds(), Now: now})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, rerr := t.st.TargetReport(ctx, p)
	if rerr != nil {
		t.log.Warn().Err(rerr).Str("outcome", string(p.Outcome)).Msg("cannot tell the breaker how a sync ended")
		return blameOf(class, false, true)
	}
	t.mu.Lock()
	since := t.downAt
	t.suspect = r.Suspects > 0
	t.mu.Unlock()
	t.see(r.BreakerState)
	switch r.Changed {
	case 1:
		t.m.TargetOpened.Add(1)
		t.log.Warn().Str("id", id).Err(err).Int64("probe_in_ms", r.Next-r.Now).
			Msg("target unavailable: breaker open; no sync starts, and none is counted against its item, until a probe succeeds")
	case -1:
		t.m.TargetClosed.Add(1)
		ev := t.log.Info().Str("id", id)
		if !since.IsZero() {
			ev = ev.Int64("down_ms", time.Since(since).Milliseconds())
		}
		ev.Msg("target available again: breaker closed")
	}
	return blameOf(class, r.Open, r.Own)
}

// blameOf is the verdict on a failure of class, with the breaker open
// or not, and own: a permanent failure is the item's own (the breaker
// found it so, or there is no breaker's word to wait for: it is off, or
// Redis did not answer).
func blameOf(class sinks.Class, open, own bool) verdict {
	switch {
	case class == sinks.ClassTarget || open:
		return blameTarget
	case class == sinks.ClassPermanent && own:
		return blameOwn
	}
	return blameItem
}

// watch keeps the breaker's view current (other daemons open and close
// it) and extends the permits held, until stop closes.
func (t *target) watch(stop <-chan struct{}) {
	if t == nil {
		return
	}
	every := min(200*time.Millisecond, t.beat)
	lastBeat := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(every, 2*time.Second))
		if !t.cfg.Breaker.Disabled {
			if st, err := t.st.TargetState(ctx); err == nil {
				t.mu.Lock()
				t.suspect = st.Suspects > 0
				t.mu.Unlock()
				t.see(st.BreakerState)
			}
		}
		if t.cfg.MaxInFlight > 0 {
			t.surplus()
			if time.Since(lastBeat) >= t.beat {
				lastBeat = time.Now()
				t.extend(ctx)
			}
		}
		cancel()
	}
}

// extend renews the permits held by ttl.
func (t *target) extend(ctx context.Context) {
	t.mu.Lock()
	held := make([]string, 0, len(t.permits))
	for p := range t.permits {
		held = append(held, p)
	}
	added := t.added
	t.mu.Unlock()
	if len(held) == 0 {
		return
	}
	sent := time.Now()
	gone, err := t.st.TargetExtend(ctx, held, t.ttl)
	switch {
	case err == nil && gone == 0:
		t.mu.Lock()
		if until := sent.Add(t.ttl * 9 / 10); t.added == added && until.After(t.sure) {
			t.sure = until
		}
		t.mu.Unlock()
	case err != nil:
		t.log.Warn().Err(err).Int("permits", len(held)).Msg("cannot extend the target's permits")
	case gone > 0:
		// Which ones is not known: none held now is kept for reuse.
		t.mu.Lock()
		t.stale = maps.Clone(t.permits)
		back := t.idle
		t.idle, t.idleLow = nil, 0
		t.mu.Unlock()
		t.release(back...)
		t.m.PermitsLost.Add(int64(gone))
		t.log.Warn().Int("gone", gone).Msg("target permits expired while their syncs ran: max_in_flight may be exceeded until they end")
	}
}
