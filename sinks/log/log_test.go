package log_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/sinks"
	logsink "github.com/syncd/syncd/sinks/log"
	"github.com/syncd/syncd/sinks/sinktest"
	"github.com/syncd/syncd/tests/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logBuffer collects log lines; zerolog writes each event in one Write.
type logBuffer struct{ testutil.Buffer }

type entry struct {
	Level     string  `json:"level"`
	Component string  `json:"component"`
	Message   string  `json:"message"`
	ID        string  `json:"id"`
	Fence     uint64  `json:"fence"`
	Owner     string  `json:"owner"`
	Attempt   int     `json:"attempt"`
	LastSync  *string `json:"last_sync"`
	Took      float64 `json:"took_ms"`
}

func (b *logBuffer) entries(t *testing.T) []entry {
	t.Helper()
	var out []entry
	sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for sc.Scan() {
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// newSink returns a sink that logs to the test log and to a buffer.
func newSink(t *testing.T, cfg logsink.Config) (*logsink.Sink, *logBuffer) {
	t.Helper()
	buf := new(logBuffer)
	logger := zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), buf))
	s, err := logsink.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return s, buf
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T, b sinktest.Behavior) sinktest.Instance {
			var cfg logsink.Config
			switch b {
			case sinktest.Fail:
				cfg.FailEvery = 1
			case sinktest.Block:
				cfg.Delay = time.Hour
			}
			s, buf := newSink(t, cfg)
			return sinktest.Instance{Sink: s, Received: func() []sinks.Item {
				var items []sinks.Item
				for _, e := range buf.entries(t) {
					if e.Message != "synced" {
						continue
					}
					it := sinks.Item{ID: e.ID, Fence: e.Fence, Owner: e.Owner, Attempt: e.Attempt}
					if e.LastSync != nil {
						ts, err := time.Parse(time.RFC3339Nano, *e.LastSync)
						if err != nil {
							t.Fatal(err)
						}
						it.LastSync = ts
					}
					items = append(items, it)
				}
				return items
			}}
		},
		FailText: "simulated failure",
	})
}

func TestValidate(t *testing.T) {
	tests := []struct {
		cfg  logsink.Config
		want string
	}{
		{logsink.Config{}, ""},
		{logsink.Config{Delay: time.Second, FailEvery: 3}, ""},
		{logsink.Config{Delay: -1}, "log: delay: "},
		{logsink.Config{FailEvery: -1}, "log: fail_every: "},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if got := errText(err); !strings.HasPrefix(got, tt.want) || (tt.want == "") != (err == nil) {
			t.Errorf("%+v.Validate() = %v, want prefix %q", tt.cfg, err, tt.want)
		}
		if _, err := logsink.New(tt.cfg, zerolog.Nop()); (tt.want == "") != (err == nil) {
			t.Errorf("New(%+v) = %v, want error %v", tt.cfg, err, tt.want != "")
		}
	}
}

func TestValidateEveryField(t *testing.T) {
	err := logsink.Config{Delay: -1, FailEvery: -2}.Validate()
	want := "log: delay: must not be negative, got -1ns\nlog: fail_every: must not be negative, got -2"
	if got := errText(err); got != want {
		t.Errorf("Validate = %q, want %q", got, want)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestFailEvery(t *testing.T) {
	s, buf := newSink(t, logsink.Config{FailEvery: 3})
	var got []bool
	for _, it := range sinktest.Items("", 7) {
		err := s.Sync(t.Context(), it)
		if err != nil && !strings.HasPrefix(err.Error(), "log: item ") {
			t.Errorf("error %q does not start with the package name", err)
		}
		if sinks.IsPermanent(err) || errors.Is(err, sinks.ErrStaleFence) {
			t.Errorf("simulated failure %v must be retryable", err)
		}
		got = append(got, err == nil)
	}
	want := []bool{true, true, false, true, true, false, true}
	if !slices.Equal(got, want) {
		t.Errorf("successes = %v, want %v", got, want)
	}
	var msgs []string
	for _, e := range buf.entries(t) {
		if e.Level != "info" || e.Component != "sink.log" {
			t.Errorf("entry %+v: want level info, component sink.log", e)
		}
		msgs = append(msgs, e.Message)
	}
	wantMsgs := []string{"synced", "synced", "sync failed", "synced", "synced", "sync failed", "synced"}
	if !slices.Equal(msgs, wantMsgs) {
		t.Errorf("messages = %q, want %q", msgs, wantMsgs)
	}
}

func TestDelay(t *testing.T) {
	s, buf := newSink(t, logsink.Config{Delay: 50 * time.Millisecond})
	start := time.Now()
	if err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Sync took %v, want at least the delay", took)
	}
	es := buf.entries(t)
	if len(es) != 1 || es[0].Took < 50 || es[0].LastSync != nil {
		t.Errorf("entries = %+v, want one with took_ms >= 50 and last_sync null", es)
	}
}

func TestDelayCancelled(t *testing.T) {
	s, buf := newSink(t, logsink.Config{Delay: time.Hour})
	cause := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(20*time.Millisecond, func() { cancel(cause) })
	err := s.Sync(ctx, sinks.Item{ID: "a"})
	if !errors.Is(err, cause) {
		t.Fatalf("Sync = %v, want it to wrap %v", err, cause)
	}
	if es := buf.entries(t); len(es) != 1 || es[0].Message != "sync cancelled" {
		t.Errorf("entries = %+v, want one \"sync cancelled\"", es)
	}
}
