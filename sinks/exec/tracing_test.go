//go:build unix

package exec_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
)

// The command gets the sync span's W3C trace context as TRACEPARENT and
// TRACESTATE; without a span it gets neither, and syncd's own
// TRACEPARENT and OTEL_* variables (an exporter's headers may hold a
// token) stay with syncd, as every variable off the allow-list does.
func TestTraceparentEnv(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer s3cret")
	dir := t.TempDir()
	out := filepath.Join(dir, "trace")
	s := newSink(t, execsink.Config{
		Command: []string{"sh", "-c", `printf '%s|%s|%s|%s' "${TRACEPARENT-unset}" "${TRACESTATE-unset}" "${OTEL_EXPORTER_OTLP_HEADERS-unset}" "$SYNCD_ID" > "$OUT"`},
		Env:     []string{"OUT=" + out},
	})
	printed := func(ctx context.Context, id string) string {
		t.Helper()
		if err := s.Sync(ctx, sinks.Item{ID: id, Fence: 1, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}

	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(t.Context(), "syncd.sync")
	defer span.End()
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01|unset|unset|a"
	if got := printed(ctx, "a"); got != want {
		t.Errorf("the command printed %q, want %q", got, want)
	}

	ts, _ := trace.ParseTraceState("vendor=abc,other=x")
	ctx = trace.ContextWithSpanContext(t.Context(), sc.WithTraceState(ts))
	if got := printed(ctx, "b"); !strings.HasSuffix(got, "-01|vendor=abc,other=x|unset|b") {
		t.Errorf("the command printed %q, want the span's traceparent and tracestate", got)
	}

	if got := printed(t.Context(), "c"); got != "unset|unset|unset|c" {
		t.Errorf("without a span the command printed %q, want no trace context and no OTEL_* variable", got)
	}
}
