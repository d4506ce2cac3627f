package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/tests/redistest"
)

// seenSync is one call of a sink: the item and the span in its context.
type seenSync struct {
	item sinks.Item
	span trace.SpanContext
}

// spanSink records each sync with the span its context carries, and fails
// as its items' names say: "bad" permanently, "flaky" on its first
// attempt.
type spanSink struct {
	mu   sync.Mutex
	seen []seenSync
}

func (s *spanSink) Sync(ctx context.Context, it sinks.Item) error {
	s.mu.Lock()
	s.seen = append(s.seen, seenSync{item: it, span: trace.SpanContextFromContext(ctx)})
	s.mu.Unlock()
	switch {
	case it.ID == "bad":
		return sinks.Permanent(errors.New("target refused bad"))
	case it.ID == "flaky" && it.Attempt == 1:
		return errors.New("flaky the first time")
	}
	return nil
}

func (s *spanSink) Close() error { return nil }

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// tracedEngine runs an engine with an in-memory exporter over ids (two
// shards) until cond holds, stops it and returns its spans by name.
func tracedEngine(t *testing.T, sink sinks.Sink, ids []string, cond func(*engine.Engine) bool) map[string]tracetest.SpanStubs {
	t.Helper()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 2)
	if _, err := st.Add(t.Context(), ids...); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	e := newEngine(t, st, sink, engine.Config{Workers: 2, Interval: time.Hour, Poll: 5 * time.Millisecond,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, TracerProvider: tp})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the syncs", func() bool { return cond(e) })
	e.Stop(context.Background()) // every sync's span ends before its goroutine
	byName := map[string]tracetest.SpanStubs{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = append(byName[s.Name], s)
	}
	return byName
}

// Every claim that won leases has a syncd.claim span, and every sync a
// syncd.sync span of its own (a root) linked to it, carrying the item,
// its fence, attempt and owner and the outcome; a failure has status
// Error with its text; the sink gets the sync's span in its context.
func TestTracingSpans(t *testing.T) {
	t.Parallel()
	sink := &spanSink{}
	ids := []string{"ok-1", "ok-2", "ok-3", "flaky", "bad"}
	var eng *engine.Engine
	spans := tracedEngine(t, sink, ids, func(e *engine.Engine) bool {
		eng = e
		return e.Metrics().SyncsOK.Load() == 4 && e.Metrics().Quarantined.Load() == 1
	})
	claims := map[trace.SpanID]map[attribute.Key]attribute.Value{}
	picked := int64(0)
	for _, c := range spans[engine.SpanClaim] {
		a := attrMap(c.Attributes)
		claims[c.SpanContext.SpanID()] = a
		picked += a["syncd.claim.picked"].AsInt64()
		if a["syncd.outcome"].AsString() != "ok" || a["syncd.claim.kind"].AsString() != "due" || c.Status.Code != codes.Unset {
			t.Errorf("claim span %v, status %v: want outcome ok, kind due", a, c.Status)
		}
	}
	// Claim-ahead may have claimed an item that was then handed back
	// unsynced (at Stop, or having waited too long): picked counts it.
	m := eng.Metrics()
	syncs, handed := spans[engine.SpanSync], m.HandedBack.Load()+m.AheadLate.Load()+m.AheadLost.Load()
	// "bad" is synced twice: its first permanent failure cannot be told
	// from the target's (see engine.BreakerConfig), its second is its own.
	if len(syncs) != 7 || picked != 7+handed {
		t.Fatalf("%d sync spans and %d items picked in %d claim spans, %d handed back unsynced; want 7 syncs, 7 + %d picked",
			len(syncs), picked, len(claims), handed, handed)
	}
	seen := map[trace.SpanID]sinks.Item{}
	for _, s := range sink.seen {
		seen[s.span.SpanID()] = s.item
	}
	for _, s := range syncs {
		a := attrMap(s.Attributes)
		it, ok := seen[s.SpanContext.SpanID()]
		if !ok {
			t.Errorf("span %v: no sink saw it in its context", a)
			continue
		}
		if a["syncd.item.id"].AsString() != it.ID || uint64(a["syncd.fence"].AsInt64()) != it.Fence ||
			a["syncd.attempt"].AsInt64() != int64(it.Attempt) || a["syncd.owner"].AsString() != it.Owner || it.Fence == 0 {
			t.Errorf("span attributes %v, the sink got %+v", a, it)
		}
		if s.Parent.IsValid() || s.SpanKind != trace.SpanKindClient {
			t.Errorf("%s: parent %v, kind %v; want a root client span", it.ID, s.Parent, s.SpanKind)
		}
		if len(s.Links) != 1 || claims[s.Links[0].SpanContext.SpanID()] == nil {
			t.Errorf("%s: links %v, want one to a claim span", it.ID, s.Links)
		} else if claim := claims[s.Links[0].SpanContext.SpanID()]; claim["syncd.shard"] != a["syncd.shard"] {
			t.Errorf("%s: shard %v, its claim's %v", it.ID, a["syncd.shard"].AsInt64(), claim["syncd.shard"].AsInt64())
		}
		checkOutcome(t, it, a, s.Status)
	}
}

// checkOutcome checks a sync span's outcome and status against what
// spanSink does with it.
func checkOutcome(t *testing.T, it sinks.Item, a map[attribute.Key]attribute.Value, st sdktrace.Status) {
	t.Helper()
	want, code, text := "ok", codes.Unset, ""
	switch {
	case it.ID == "bad" && it.Attempt == 1:
		want, code, text = "failed", codes.Error, "target refused bad"
	case it.ID == "bad":
		want, code, text = "quarantined", codes.Error, "target refused bad"
	case it.ID == "flaky" && it.Attempt == 1:
		want, code, text = "failed", codes.Error, "flaky the first time"
	}
	if got := a["syncd.outcome"].AsString(); got != want || !a["syncd.recorded"].AsBool() {
		t.Errorf("%s attempt %d: outcome %q recorded %v, want %q recorded", it.ID, it.Attempt, got, a["syncd.recorded"].AsBool(), want)
	}
	if st.Code != code || !strings.Contains(st.Description, text) {
		t.Errorf("%s attempt %d: status %v %q, want %v with %q", it.ID, it.Attempt, st.Code, st.Description, code, text)
	}
}

// Without a TracerProvider the sink's context carries no span, so no
// sink hands on a trace context.
func TestTracingOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := openStore(t, srv.Addr(), 1)
	st.Add(t.Context(), "a")
	sink := &spanSink{}
	e := newEngine(t, st, sink, engine.Config{Workers: 1, Interval: time.Hour, Poll: 5 * time.Millisecond})
	e.Start(t.Context())
	waitFor(t, 5*time.Second, "the sync", func() bool { return e.Metrics().SyncsOK.Load() == 1 })
	e.Stop(context.Background())
	if sc := sink.seen[0].span; sc.IsValid() {
		t.Errorf("the sink's context carries span %v with tracing off", sc)
	}
}
