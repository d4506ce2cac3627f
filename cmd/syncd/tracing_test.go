package main

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/tests/testutil"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// Tracing is off by default and turned on only by the OTEL_* variables.
func TestTracingWanted(t *testing.T) {
	tests := []struct {
		env  []string
		want bool
		warn string
	}{
		{nil, false, ""},
		{[]string{"OTEL_SERVICE_NAME", "x"}, false, ""},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, true, ""},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, true, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, true, ""},
		{[]string{"OTEL_TRACES_EXPORTER", " OTLP , console"}, true, `"exporter":"console"`},
		{[]string{"OTEL_TRACES_EXPORTER", "zipkin"}, false, `"exporter":"zipkin"`},
		{[]string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, false, ""},
		{[]string{"OTEL_SDK_DISABLED", "TRUE", "OTEL_TRACES_EXPORTER", "otlp"}, false, ""},
		{[]string{"OTEL_SDK_DISABLED", "false", "OTEL_TRACES_EXPORTER", "otlp"}, true, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, true, "only OTLP over http/protobuf"},
	}
	for _, tt := range tests {
		var logs testutil.Buffer
		if got := tracingWanted(envOf(tt.env...), zerolog.New(&logs)); got != tt.want {
			t.Errorf("%q: tracing %v, want %v", tt.env, got, tt.want)
		}
		if got := logs.String(); tt.warn == "" && got != "" || !strings.Contains(got, tt.warn) {
			t.Errorf("%q: logged %q, want %q", tt.env, got, tt.warn)
		}
	}
}

// The log names where spans go, without credentials.
func TestTracesEndpoint(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{nil, "https://localhost:4318/v1/traces (the default)"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://user:pw@otel.example:4318/?token=s3cret"}, "https://otel.example:4318/v1/traces"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4318/t"}, "http://b:4318/t"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4318/\x00"}, "(unparsable)"},
	}
	for _, tt := range tests {
		if got := tracesEndpoint(envOf(tt.env...)); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.env, got, tt.want)
		}
	}
}

// Off: no provider. On: a provider named after OTEL_SERVICE_NAME, which
// stop flushes and shuts down (goleak checks its goroutines end).
func TestStartTracing(t *testing.T) {
	var logs testutil.Buffer
	log := zerolog.New(&logs)
	tp, stop, err := startTracing(t.Context(), log)
	if tp != nil || err != nil {
		t.Fatalf("off: provider %v, error %v", tp, err)
	}
	stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SERVICE_NAME", "syncd-test")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "100") // ms: the flush at stop fails fast
	tp, stop, err = startTracing(t.Context(), log)
	if tp == nil || err != nil {
		t.Fatalf("on: provider %v, error %v", tp, err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "x")
	if !span.SpanContext().IsValid() || !span.IsRecording() {
		t.Errorf("span %v not recording", span.SpanContext())
	}
	span.End()
	stop()
	got := logs.String()
	if !strings.Contains(got, `"endpoint":"http://127.0.0.1:1/v1/traces","service":"syncd-test","message":"tracing on`) {
		t.Errorf("log %q: want the endpoint and service", got)
	}
	if !strings.Contains(got, `connection refused","message":"tracing: export failed"`) {
		t.Errorf("log %q: want the failed flush in our log (nothing listens on port 1)", got)
	}
}
