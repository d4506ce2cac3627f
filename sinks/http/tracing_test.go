package http_test

import (
	"context"
	nethttp "net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/sinks"
	httpsink "github.com/syncd/syncd/sinks/http"
)

// syncSpan starts a span as the engine starts a sync's, from a real SDK
// provider with a recording exporter, and adds a tracestate entry.
func syncSpan(t *testing.T) (context.Context, trace.Span) {
	t.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	// The tracestate rides on a remote parent, as from an upstream caller.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), parent)
	return tp.Tracer("test").Start(ctx, "syncd.sync")
}

// A real target receives the sync span's W3C trace context: traceparent
// with its trace and span IDs, and its tracestate; a sync without a span
// sends neither header.
func TestTraceContextHeaders(t *testing.T) {
	headers := make(chan nethttp.Header, 2)
	srv := newServer(t, func(w nethttp.ResponseWriter, r *nethttp.Request, _ func()) {
		headers <- r.Header.Clone()
	})
	s := newSink(t, httpsink.Config{URL: srv.URL + "/hook"})
	ctx, span := syncSpan(t)
	defer span.End()
	if err := s.Sync(ctx, sinks.Item{ID: "a", Fence: 1, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	h := <-headers
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if got := h.Get("Traceparent"); got != want {
		t.Errorf("traceparent %q, want %q (the sync span's)", got, want)
	}
	if got := h.Get("Tracestate"); got != "vendor=abc" {
		t.Errorf("tracestate %q, want vendor=abc", got)
	}

	if err := s.Sync(t.Context(), sinks.Item{ID: "b", Fence: 1, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	h = <-headers
	if got := h.Values("Traceparent"); len(got) != 0 || len(h.Values("Tracestate")) != 0 {
		t.Errorf("traceparent %q, tracestate %q without a span; want neither", got, h.Values("Tracestate"))
	}
}
