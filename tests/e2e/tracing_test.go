package e2e

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// otlpReceiver is an OTLP/HTTP trace receiver: POST /v1/traces with a
// protobuf ExportTraceServiceRequest.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each resource
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP trace export", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				rc.services = append(rc.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// syncSpan returns the received syncd.sync span with the given trace and
// span IDs (hex), and its attributes as strings.
func (rc *otlpReceiver) syncSpan(traceID, spanID string) (map[string]string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, s := range rc.spans {
		if s.GetName() != "syncd.sync" || hex.EncodeToString(s.GetTraceId()) != traceID || hex.EncodeToString(s.GetSpanId()) != spanID {
			continue
		}
		attrs := map[string]string{}
		for _, a := range s.GetAttributes() {
			switch v := a.GetValue().GetValue().(type) {
			case *commonpb.AnyValue_StringValue:
				attrs[a.GetKey()] = v.StringValue
			case *commonpb.AnyValue_IntValue:
				attrs[a.GetKey()] = fmt.Sprint(v.IntValue)
			}
		}
		return attrs, true
	}
	return nil, false
}

// hookTarget is the http sink's target: it keeps the traceparent each
// item's POST carried.
type hookTarget struct {
	mu     sync.Mutex
	parent map[string]string // item id -> traceparent
}

func (h *hookTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var it struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&it); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.parent[it.ID] = r.Header.Get("Traceparent")
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookTarget) seen() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	for k, v := range h.parent {
		out[k] = v
	}
	return out
}

// A trace of one sync through the http sink reaches the target with the
// same trace ID: `syncd run`, turned on by OTEL_EXPORTER_OTLP_ENDPOINT
// alone, exports each sync's span over OTLP/HTTP, and the target gets the
// span's traceparent.
func TestTracingOTLP(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	rc := &otlpReceiver{}
	collector := httptest.NewServer(rc)
	t.Cleanup(collector.Close)
	target := &hookTarget{parent: map[string]string{}}
	hook := httptest.NewServer(target)
	t.Cleanup(hook.Close)
	cfg := writeConfig(t, redisConfig(srv, "trace", fmt.Sprintf(`engine:
  interval: 1h
items:
  ids: [a, b]
sink:
  type: http
  http:
    url: %s/hook
`, hook.URL)))
	daemon, stderr := syncd.Daemon(t, cfg, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL,
		"OTEL_SERVICE_NAME=syncd-e2e", "OTEL_BSP_SCHEDULE_DELAY=100")
	waitFor(t, 15*time.Second, "the target to see both items", func() bool { return len(target.seen()) == 2 })
	for id, tp := range target.seen() {
		// 00-<trace id>-<parent id: the sync span>-<flags>
		f := strings.Split(tp, "-")
		if len(f) != 4 || f[0] != "00" || len(f[1]) != 32 || len(f[2]) != 16 || f[3] != "01" {
			t.Fatalf("item %s: traceparent %q", id, tp)
		}
		var attrs map[string]string
		waitFor(t, 10*time.Second, "the sync span of "+id+" at the collector", func() bool {
			var ok bool
			attrs, ok = rc.syncSpan(f[1], f[2])
			return ok
		})
		if attrs["syncd.item.id"] != id || attrs["syncd.outcome"] != "ok" || attrs["syncd.attempt"] != "1" {
			t.Errorf("item %s: span attributes %v", id, attrs)
		}
	}
	rc.mu.Lock()
	services := rc.services
	rc.mu.Unlock()
	if len(services) == 0 || services[0] != "syncd-e2e" {
		t.Errorf("service names %q, want syncd-e2e", services)
	}
	if got := logField(t, stderr.String(), "tracing on", "endpoint"); got != collector.URL+"/v1/traces" {
		t.Errorf("tracing logged endpoint %q, want %q", got, collector.URL+"/v1/traces")
	}
	daemon.Signal(syscall.SIGTERM)
	if err := daemon.Wait(10 * time.Second); err != nil {
		if errors.Is(err, testutil.ErrRunning) {
			t.Fatal("no exit after SIGTERM")
		}
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
