package engine

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// The scheduler tests run the engine over fakeOwn in synctest bubbles:
// time is fake, so every assertion about when is exact.

// startFake starts an engine over f; stop it inside the bubble.
func startFake(t *testing.T, f *fakeOwn, sink sinks.Sink, cfg Config) *Engine {
	t.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	c, err := cfg.resolve()
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(f, f, sink, c)
	e.addr = "fake"
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e
}

// syncLog is a sink that records when each sync began, holding each for
// hold (or until its context ends, if hold is 0).
type syncLog struct {
	hold time.Duration

	mu       sync.Mutex
	ids      []string
	at       map[string]time.Time
	now, max int // concurrent syncs, and the most seen
}

func (s *syncLog) Sync(ctx context.Context, it sinks.Item) error {
	s.mu.Lock()
	s.ids = append(s.ids, it.ID)
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[it.ID] = time.Now()
	s.now++
	s.max = max(s.max, s.now)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	if s.hold == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	time.Sleep(s.hold)
	return nil
}

func (s *syncLog) Close() error { return nil }

func (s *syncLog) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

// Items are claimed longest-waiting first across shards: the scheduler
// goes to the shard whose head has waited longest, and learns each
// shard's new head from its claim.
func TestSchedulerLongestWaitingShardFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(3)
		f.add(0, "a-30s", -30*time.Second)
		f.add(0, "a-5s", -5*time.Second)
		f.add(1, "b-20s", -20*time.Second)
		f.add(1, "b-10s", -10*time.Second)
		f.add(2, "c-15s", -15*time.Second)
		f.add(2, "c-later", time.Hour)
		sink := &syncLog{hold: 100 * time.Millisecond}
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 1, Interval: time.Hour})
		time.Sleep(2 * time.Second)
		e.Stop(context.Background())
		want := []string{"a-30s", "b-20s", "c-15s", "b-10s", "a-5s"}
		if diff := cmp.Diff(sink.order(), want); diff != "" {
			t.Errorf("sync order (-got +want):\n%s", diff)
		}
		for _, p := range f.pickLog() {
			if p.shard == 2 && len(p.got) == 0 {
				t.Errorf("picked shard 2 at +%v with nothing due there", p.at.Sub(sink.at["a-30s"]))
			}
		}
	})
}

// A shard that ownership holds off is skipped, without asking again, for
// as long as the hold lasts; the other shards go on in the same round,
// and the held shard's items come back when the hold ends.
func TestSchedulerSkipsHeldShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(2)
		f.add(0, "held", -20*time.Second)
		f.add(1, "free", -10*time.Second)
		const hold, poll = 5 * time.Second, 250 * time.Millisecond
		f.holdAtNextPick(0, hold)
		sink := &syncLog{hold: 10 * time.Millisecond}
		start := time.Now()
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 1, Poll: poll, Interval: time.Hour})
		time.Sleep(2 * hold)
		e.Stop(context.Background())
		if diff := cmp.Diff(sink.order(), []string{"free", "held"}); diff != "" {
			t.Fatalf("sync order (-got +want):\n%s", diff)
		}
		if at := sink.at["free"].Sub(start); at != 0 {
			t.Errorf("free shard synced at +%v, want at once (same round as the hold)", at)
		}
		if at := sink.at["held"].Sub(start); at < hold || at > hold+poll {
			t.Errorf("held shard synced at +%v, want within a poll after the hold's end (+%v)", at, hold)
		}
		asked := 0
		for _, p := range f.pickLog() {
			if p.held {
				asked++
			}
		}
		if asked != 1 {
			t.Errorf("%d picks found the shard held, want 1 (the one that learned it)", asked)
		}
	})
}

// Workers bounds the syncs that run at once.
func TestSchedulerWorkersBoundSyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(4)
		for i := range 24 {
			f.add(i%4, string(rune('a'+i)), -time.Duration(i+1)*time.Second)
		}
		sink := &syncLog{hold: time.Second}
		e := startFake(t, f, sink, Config{Workers: 3, Interval: time.Hour})
		time.Sleep(8*time.Second + 500*time.Millisecond)
		e.Stop(context.Background())
		if n := len(sink.order()); n != 24 {
			t.Errorf("%d syncs in 8.5s of 1s each on 3 workers, want 24", n)
		}
		if sink.max != 3 {
			t.Errorf("at most %d syncs at once, want 3", sink.max)
		}
	})
}

// Batch bounds how many items one claim asks for, however many workers
// are free.
func TestSchedulerBatchBoundsRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(1)
		for i := range 20 {
			f.add(0, string(rune('a'+i)), -time.Duration(i+1)*time.Second)
		}
		sink := &syncLog{hold: time.Second}
		e := startFake(t, f, sink, Config{Workers: 8, Batch: 3, Interval: time.Hour})
		time.Sleep(2 * time.Second)
		e.Stop(context.Background())
		most := 0
		for _, p := range f.pickLog() {
			most = max(most, p.n)
		}
		if most != 3 {
			t.Errorf("a claim asked for up to %d items, want Batch = 3", most)
		}
		if sink.max != 8 {
			t.Errorf("at most %d syncs at once, want all 8 workers busy", sink.max)
		}
	})
}

// Stop lets a sync that finishes within DrainTimeout record its outcome,
// cancels the rest when it passes and hands their items back at once,
// due where they were.
func TestSchedulerDrainHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(1)
		f.add(0, "stuck", -10*time.Second)
		f.add(0, "quick", -5*time.Second)
		stuckDue := f.due("stuck")
		const drain = 2 * time.Second
		sink := sinks.Func(func(ctx context.Context, it sinks.Item) error {
			if it.ID == "quick" {
				time.Sleep(1500 * time.Millisecond)
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		})
		e := startFake(t, f, sink, Config{Workers: 2, DrainTimeout: drain, Interval: time.Hour})
		time.Sleep(time.Second)
		stop := time.Now()
		e.Stop(context.Background())
		if took := time.Since(stop); took != drain {
			t.Errorf("Stop took %v, want DrainTimeout %v", took, drain)
		}
		got := map[string]fakeRelease{}
		for _, r := range f.releaseLog() {
			got[r.id] = r
		}
		if r := got["quick"]; r.kind != ownership.OutcomeSynced || r.at.Sub(stop) != 500*time.Millisecond {
			t.Errorf("quick: released %+v, want synced 500ms into the drain", r)
		}
		if r := got["stuck"]; r.kind != ownership.OutcomeHandBack || r.at.Sub(stop) != drain {
			t.Errorf("stuck: released %+v, want handed back when the drain timed out", r)
		}
		if due := f.due("stuck"); due != stuckDue {
			t.Errorf("stuck is due at %d after the hand-back, want %d, where it was", due, stuckDue)
		}
	})
}

// A shard whose keys are damaged is tried once, then once every
// damageProbe, not every poll, while the other shards go on; Damaged
// names it until a probe finds it working again, and its items then
// sync.
func TestSchedulerProbesDamagedShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(2)
		f.add(0, "damaged", -20*time.Second)
		f.add(1, "fine", -10*time.Second)
		f.damage(0, errors.New("WRONGTYPE planted"))
		const poll = 250 * time.Millisecond
		sink := &syncLog{hold: 10 * time.Millisecond}
		start := time.Now()
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 1, Poll: poll, Interval: time.Hour})
		time.Sleep(2*damageProbe + time.Second)
		if got := e.Damaged(); len(got) != 1 || !errors.Is(got[0], store.ErrDamaged) {
			t.Errorf("Damaged() = %v, want shard 0", got)
		}
		f.damage(0, nil)
		fixed := time.Now()
		time.Sleep(damageProbe)
		e.Stop(context.Background())
		if diff := cmp.Diff(sink.order(), []string{"fine", "damaged"}); diff != "" {
			t.Fatalf("sync order (-got +want):\n%s", diff)
		}
		if at := sink.at["fine"].Sub(start); at != 0 {
			t.Errorf("the healthy shard synced at +%v, want at once", at)
		}
		var tries []time.Duration
		for _, p := range f.pickLog() {
			if p.shard == 0 && p.at.Before(fixed) {
				tries = append(tries, p.at.Sub(start))
			}
		}
		// Found at once, then tried at the first poll after each probe
		// time.
		if len(tries) != 3 || tries[0] != 0 {
			t.Fatalf("the damaged shard was picked at %v, want at 0 and about every %v", tries, damageProbe)
		}
		for i, at := range tries[1:] {
			if since := at - tries[i]; since < damageProbe || since > damageProbe+poll {
				t.Errorf("the damaged shard was picked at %v, want every %v (within a poll)", tries, damageProbe)
			}
		}
		if at := sink.at["damaged"].Sub(fixed); at > damageProbe {
			t.Errorf("shard 0 synced %v after the fix, want within a probe (%v)", at, damageProbe)
		}
		if got := e.Damaged(); len(got) != 0 {
			t.Errorf("Damaged() after the fix = %v, want none", got)
		}
	})
}

// A shard out of reach (its Cluster master paused or cut off while the
// others answer) costs only itself: the other shards sync at once, the
// scheduler reads it again only every awayProbe instead of waiting on
// it in every round, and its items sync within a probe once it answers.
func TestSchedulerSkipsShardOutOfReach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeOwn(2)
		f.add(0, "away", -20*time.Second)
		f.add(1, "fine", -10*time.Second)
		f.unreachable(0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
		const poll = 250 * time.Millisecond
		sink := &syncLog{hold: 10 * time.Millisecond}
		start := time.Now()
		e := startFake(t, f, sink, Config{Workers: 1, Batch: 1, Poll: poll, Interval: time.Hour})
		time.Sleep(2*damageProbe + time.Second)
		if got := e.OutOfReach(); len(got) != 1 || !strings.Contains(got[0].Error(), "shard 0 out of reach") {
			t.Errorf("OutOfReach() = %v, want shard 0", got)
		}
		if got := e.Damaged(); len(got) != 0 {
			t.Errorf("Damaged() = %v, want none: the shard is out of reach, not damaged", got)
		}
		f.unreachable(0, nil)
		back := time.Now()
		time.Sleep(damageProbe + time.Second)
		if got := e.OutOfReach(); len(got) != 0 {
			t.Errorf("OutOfReach() once the shard answers = %v, want none", got)
		}
		e.Stop(context.Background())
		if diff := cmp.Diff(sink.order(), []string{"fine", "away"}); diff != "" {
			t.Fatalf("sync order (-got +want):\n%s", diff)
		}
		if at := sink.at["fine"].Sub(start); at != 0 {
			t.Errorf("the shard that answers synced at +%v, want at once", at)
		}
		if at := sink.at["away"].Sub(back); at > awayProbe+poll {
			t.Errorf("shard 0 synced %v after it answered again, want within a probe (%v)", at, awayProbe)
		}
		var reads []time.Duration
		for _, at := range f.readLog(0) {
			if at.Before(back) {
				reads = append(reads, at.Sub(start))
			}
		}
		// Found at once, then read at the first round after each probe
		// time.
		if len(reads) < 10 || len(reads) > 12 || reads[0] != 0 {
			t.Fatalf("shard 0 was read at %v while out of reach, want at 0 and about every %v", reads, awayProbe)
		}
		for i, at := range reads[1:] {
			if since := at - reads[i]; since < awayProbe || since > awayProbe+poll {
				t.Errorf("shard 0 was read at %v, want every %v (within a poll)", reads, awayProbe)
			}
		}
		if n := len(f.readLog(1)); n < 3 {
			t.Errorf("shard 1 was read %d times, want every round", n)
		}
		for _, p := range f.pickLog() {
			if p.shard == 0 && p.at.Before(back) {
				t.Errorf("shard 0 was picked at +%v while out of reach", p.at.Sub(start))
			}
		}
	})
}
