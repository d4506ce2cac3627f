package engine

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// discard is a span exporter that drops what it gets: the benchmark
// measures the engine's spans and the SDK's batching, not an export.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkSyncTracing measures what tracing adds to one sync, counting
// one claim span per sync (the worst case: every claim wins one item):
// baseline is the sink call alone, without any tracing code; off is the
// engine's path with no TracerProvider; unsampled has an SDK provider
// whose sampler drops every span; on records every span and hands it to
// a batch span processor (whose exporter drops it).
func BenchmarkSyncTracing(b *testing.B) {
	lctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := ownership.NewLease(lctx, ownership.LeaseParams{ID: "cust-0042", Shard: 3, Fence: 1 << 40, Attempt: 1,
		Owner: store.Owner{Host: "host", PID: 41, Run: "r1", Worker: 3}, TTL: time.Hour})
	var sink sinks.Func = func(ctx context.Context, it sinks.Item) error {
		_ = trace.SpanContextFromContext(ctx) // what a sink that hands the trace on looks up
		return nil
	}
	item := sinks.Item{ID: l.ID(), Fence: l.Fence(), Owner: "host/41/w3", Attempt: l.Attempt()}
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink.Sync(lctx, item)
		}
	})
	run := func(b *testing.B, tp trace.TracerProvider) {
		e := &Engine{tracer: newTracer(tp)}
		req := claimReq{shard: 3, n: 1}
		b.ReportAllocs()
		for b.Loop() {
			ct := e.startClaim(req, 1)
			claim := e.endClaim(ct, 1, nil)
			ctx, span := e.startSync(lctx, l, claim, false)
			sink.Sync(ctx, item)
			endSync(lctx, span, outcomeSynced, true, nil)
		}
	}
	b.Run("off", func(b *testing.B) { run(b, nil) })
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"unsampled", sdktrace.NeverSample()}, {"on", sdktrace.AlwaysSample()}} {
		b.Run(tc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithBatcher(discard{}))
			defer tp.Shutdown(context.Background())
			run(b, tp)
		})
	}
}
