package file_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/sinks/file"
	"github.com/syncd/syncd/sinks/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// record mirrors the documented line format.
type record struct {
	ID       string    `json:"id"`
	Fence    uint64    `json:"fence"`
	Owner    string    `json:"owner"`
	Attempt  int       `json:"attempt"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	OK       bool      `json:"ok"`
	Error    string    `json:"error"`
}

// readLines parses every line of path strictly: each must be one JSON
// object with exactly the documented fields.
func readLines(t *testing.T, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("file does not end with a newline")
	}
	var out []record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var r record
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d %q: %v", len(out)+1, sc.Text(), err)
		}
		if dec.More() {
			t.Fatalf("line %d %q: more than one value", len(out)+1, sc.Text())
		}
		var keys map[string]any
		if err := json.Unmarshal(sc.Bytes(), &keys); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 8 {
			t.Fatalf("line %d has keys %v, want the 8 documented ones", len(out)+1, keys)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func newSink(t *testing.T, cfg file.Config) *file.Sink {
	t.Helper()
	s, err := file.New(cfg, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeSink(t *testing.T, s *file.Sink) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T, b sinktest.Behavior) sinktest.Instance {
			cfg := file.Config{Path: filepath.Join(t.TempDir(), "sync.jsonl")}
			switch b {
			case sinktest.Fail:
				cfg.Inner = sinks.Func(func(context.Context, sinks.Item) error {
					return errors.New("inner refused")
				})
			case sinktest.Block:
				cfg.Inner = sinks.Func(func(ctx context.Context, _ sinks.Item) error {
					<-ctx.Done()
					return context.Cause(ctx)
				})
			}
			return sinktest.Instance{
				Sink: newSink(t, cfg),
				Received: func() []sinks.Item {
					var items []sinks.Item
					for _, r := range readLines(t, cfg.Path) {
						if !r.OK {
							t.Errorf("line for %q has ok false: %q", r.ID, r.Error)
						}
						items = append(items, sinks.Item{ID: r.ID, Fence: r.Fence, Owner: r.Owner, Attempt: r.Attempt})
					}
					return items
				},
			}
		},
		Unobserved: []string{"LastSync"}, // not part of the line format
		FailText:   "inner refused",
	})
}

func TestConcurrentLines(t *testing.T) {
	const goroutines, syncs = 64, 50
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	s := newSink(t, file.Config{Path: path})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range syncs {
				it := sinks.Item{
					ID: fmt.Sprintf("g%d/i%d", g, i), Fence: uint64(g*syncs + i), Attempt: 1,
					// A longish owner makes torn lines more likely to show.
					Owner: strings.Repeat("o", 200+g),
				}
				if err := s.Sync(t.Context(), it); err != nil {
					t.Errorf("Sync(%q) = %v", it.ID, err)
				}
			}
		})
	}
	wg.Wait()
	closeSink(t, s)

	lines := readLines(t, path)
	if len(lines) != goroutines*syncs {
		t.Fatalf("got %d lines, want %d", len(lines), goroutines*syncs)
	}
	seen := make(map[string]bool)
	for _, r := range lines {
		if seen[r.ID] {
			t.Fatalf("line for %q written twice", r.ID)
		}
		seen[r.ID] = true
		if !r.OK || r.Error != "" || r.Finished.Before(r.Started) {
			t.Fatalf("bad line %+v", r)
		}
	}
}

// TestTwoSinksOneFile has two sinks, with separate file descriptors and no
// shared mutex, append to one file, as two processes would.
func TestTwoSinksOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	a := newSink(t, file.Config{Path: path})
	b := newSink(t, file.Config{Path: path})
	var wg sync.WaitGroup
	for g := range 16 {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Go(func() {
			for i := range 50 {
				it := sinks.Item{ID: fmt.Sprintf("g%d/i%d", g, i), Owner: strings.Repeat("x", 3000)}
				if err := s.Sync(t.Context(), it); err != nil {
					t.Errorf("Sync = %v", err)
				}
			}
		})
	}
	wg.Wait()
	closeSink(t, a)
	closeSink(t, b)
	if n := len(readLines(t, path)); n != 16*50 {
		t.Fatalf("got %d lines, want %d", n, 16*50)
	}
}

func TestInnerOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	innerErr := fmt.Errorf("target: %w", sinks.ErrStaleFence)
	fail := map[string]bool{"b": true}
	clock := time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	var mu sync.Mutex
	s := newSink(t, file.Config{
		Path: path,
		Inner: sinks.Func(func(_ context.Context, it sinks.Item) error {
			if fail[it.ID] {
				return innerErr
			}
			return nil
		}),
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		},
	})
	if err := s.Sync(t.Context(), sinks.Item{ID: "a", Fence: 1, Owner: "w1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(t.Context(), sinks.Item{ID: "b", Fence: 2, Owner: "w2", Attempt: 3}); err != innerErr {
		t.Fatalf("Sync = %v, want the inner error unchanged", err)
	}
	closeSink(t, s)

	t0 := time.Date(2025, 1, 2, 2, 4, 5, 0, time.UTC)
	want := []record{
		{ID: "a", Fence: 1, Owner: "w1", Attempt: 1, Started: t0.Add(1 * time.Second), Finished: t0.Add(2 * time.Second), OK: true},
		{ID: "b", Fence: 2, Owner: "w2", Attempt: 3, Started: t0.Add(3 * time.Second), Finished: t0.Add(4 * time.Second), Error: innerErr.Error()},
	}
	if diff := cmp.Diff(readLines(t, path), want); diff != "" {
		t.Errorf("lines (-got +want):\n%s", diff)
	}
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte(`"started":"2025-01-02T02:04:06Z"`)) {
		t.Errorf("times are not written in UTC:\n%s", data)
	}
}

func TestLongErrorTruncated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	long := errors.New(strings.Repeat("é", 3000))
	s := newSink(t, file.Config{Path: path, Inner: sinks.Func(func(context.Context, sinks.Item) error { return long })})
	if err := s.Sync(t.Context(), sinks.Item{ID: "a"}); err != long {
		t.Fatalf("Sync = %v", err)
	}
	closeSink(t, s)
	data, _ := os.ReadFile(path)
	if len(data) >= 4096 {
		t.Errorf("line is %d bytes, want < 4096", len(data))
	}
	r := readLines(t, path)[0]
	if !strings.HasSuffix(r.Error, "…") || !strings.HasPrefix(r.Error, "éé") {
		t.Errorf("error = %q, want a truncated prefix", r.Error)
	}
}

func TestCancelledWithoutInner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	s := newSink(t, file.Config{Path: path})
	cause := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	err := s.Sync(ctx, sinks.Item{ID: "a"})
	if !errors.Is(err, cause) || !strings.HasPrefix(err.Error(), "file: ") {
		t.Fatalf("Sync = %v, want file: ... wrapping %v", err, cause)
	}
	closeSink(t, s)
	if r := readLines(t, path); len(r) != 1 || r[0].OK || !strings.Contains(r[0].Error, "lease lost") {
		t.Errorf("lines = %+v, want one with ok false", r)
	}
}

func TestAppendsAndCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	s := newSink(t, file.Config{Path: path})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("New did not create the file: %v", err)
	}
	if perm := fi.Mode().Perm(); perm&^0o644 != 0 || perm&0o600 != 0o600 {
		t.Errorf("mode = %v, want 0644 less the umask", perm)
	}
	if err := s.Sync(t.Context(), sinks.Item{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	closeSink(t, s)
	s = newSink(t, file.Config{Path: path})
	if err := s.Sync(t.Context(), sinks.Item{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	closeSink(t, s)
	lines := readLines(t, path)
	if len(lines) != 2 || lines[0].ID != "a" || lines[1].ID != "b" {
		t.Errorf("lines = %+v, want a then b", lines)
	}
}

func TestClose(t *testing.T) {
	s := newSink(t, file.Config{Path: filepath.Join(t.TempDir(), "sync.jsonl")})
	closeSink(t, s)
	closeSink(t, s) // a second Close is harmless
	if err := s.Sync(t.Context(), sinks.Item{ID: "a"}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Sync after Close = %v, want os.ErrClosed", err)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "plain")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		want   string
		wantIs error
	}{
		{"empty", "", "file: path: must not be empty", nil},
		{"missing parent", filepath.Join(dir, "nope", "sync.jsonl"), "file: path: parent directory of ", fs.ErrNotExist},
		{"parent is a file", filepath.Join(notDir, "sync.jsonl"), "file: path: parent ", nil},
		{"path is a directory", dir, "file: path: " + strconv.Quote(dir) + " is a directory", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// CheckPath, which syncd validate runs, refuses what New does
			// (it passed a directory, which New refused).
			if err := file.CheckPath(tt.path); tt.path != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)) {
				t.Errorf("CheckPath(%q) = %v, want prefix %q", tt.path, err, tt.want)
			}
			s, err := file.New(file.Config{Path: tt.path}, zerolog.Nop())
			if err == nil {
				s.Close()
				t.Fatalf("New(%q) = nil error", tt.path)
			}
			t.Log(err)
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New(%q) = %q, want prefix %q", tt.path, err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("New(%q) = %v, want it to wrap %v", tt.path, err, tt.wantIs)
			}
		})
	}
}
