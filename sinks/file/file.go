// Package file provides a sink that appends one JSON line per sync to a
// file:
//
//	{"id":"a","fence":12,"owner":"host/41/run/w3","attempt":1,"started":"2024-05-01T10:00:00.1Z","finished":"2024-05-01T10:00:00.3Z","ok":true,"error":""}
//
// On its own the sink is the sync: writing the line is all it does. With
// Config.Inner set it is an audit log around another sink: it calls the
// inner sink, records its outcome (ok false and the error text on failure)
// and returns the inner error unchanged, so the engine classifies it as the
// inner sink meant.
//
// Lines never interleave. Within a process a mutex orders them; each line is
// written with a single write(2) on a file opened with O_APPEND, which on
// local file systems also keeps lines from several processes apart (POSIX
// promises nothing for network file systems such as NFS). Lines stay below
// 4 KiB unless the ID or owner are very long: the error text is cut to
// 1 KiB. The sink does not fsync: after a machine crash the last lines may
// be lost, which at-least-once delivery tolerates.
package file

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
)

// Log field keys.
const (
	fieldComponent = "component"
	fieldPath      = "path"
)

// maxErrorText is the longest error text a line records, in bytes.
const maxErrorText = 1024

// CheckPath checks what New needs of Config.Path without creating the
// file: its parent directory must exist, and the path must not name a
// directory. syncd validate uses it, and run before it writes to Redis.
func CheckPath(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return sinks.ConfigErrorf("file", "path", "parent directory of %q: %w", path, err)
	}
	if !fi.IsDir() {
		return sinks.ConfigErrorf("file", "path", "parent %q of %q is not a directory", dir, path)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return sinks.ConfigErrorf("file", "path", "%q is a directory: give the path of a file to append to", path)
	}
	return nil
}

// Config configures a file sink.
type Config struct {
	// Path is the file to append to. It is created with mode 0644 (less the
	// umask) if missing; its parent directory must exist. Required.
	Path string

	// Inner, if not nil, is the sink whose syncs are recorded. The file
	// sink does not close it: Inner belongs to whoever built it. Default
	// nil: the file sink is the sync, and records ok true unless the
	// context was already done.
	Inner sinks.Sink

	// Now returns the current time for the started and finished fields.
	// Default time.Now.
	Now func() time.Time
}

// Validate reports the invalid field of c, naming it; Path is the only one
// that can be. It does not touch the file system; New does.
func (c Config) Validate() error {
	if c.Path == "" {
		return sinks.ConfigErrorf("file", "path", "must not be empty")
	}
	return nil
}

// Sink is a sink that appends a JSON line per sync to a file. It is safe for
// concurrent use.
type Sink struct {
	path   string
	inner  sinks.Sink
	now    func() time.Time
	logger zerolog.Logger

	mu sync.Mutex // orders writes, guards f
	f  *os.File   // nil once closed
}

var _ sinks.Sink = (*Sink)(nil)

// New opens cfg.Path for appending, creating it if missing, and returns a
// sink that logs to a sub-logger of logger with the field
// component=sink.file.
func New(cfg Config, logger zerolog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckPath(cfg.Path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, sinks.ConfigErrorf("file", "path", "%w", err)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &Sink{
		path:   cfg.Path,
		inner:  cfg.Inner,
		now:    now,
		logger: logger.With().Str(fieldComponent, "sink.file").Str(fieldPath, cfg.Path).Logger(),
		f:      f,
	}
	s.logger.Debug().Bool("inner", cfg.Inner != nil).Msg("file opened")
	return s, nil
}

// line is one record. Its fields are the file format: do not rename them.
type line struct {
	ID       string    `json:"id"`
	Fence    uint64    `json:"fence"`
	Owner    string    `json:"owner"`
	Attempt  int       `json:"attempt"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	OK       bool      `json:"ok"`
	Error    string    `json:"error"` // empty when OK
}

// Sync runs the inner sink, if any, and appends a line recording the
// outcome. It returns the inner sink's error unchanged; without an inner
// sink, an error wrapping context.Cause(ctx) if ctx is already done. If the
// line cannot be written Sync returns an error even when the inner sink
// succeeded: an unrecorded sync counts as failed, and is retried.
func (s *Sink) Sync(ctx context.Context, item sinks.Item) error {
	started := s.now()
	var err error
	if s.inner != nil {
		err = s.inner.Sync(ctx, item)
	} else if cause := context.Cause(ctx); cause != nil {
		err = fmt.Errorf("file: item %q: %w", item.ID, cause)
	}
	rec := line{
		ID:       item.ID,
		Fence:    item.Fence,
		Owner:    item.Owner,
		Attempt:  item.Attempt,
		Started:  started.UTC(),
		Finished: s.now().UTC(),
		OK:       err == nil,
	}
	if err != nil {
		rec.Error = truncate(err.Error(), maxErrorText)
	}
	if werr := s.write(&rec); werr != nil {
		werr = fmt.Errorf("file: item %q: %w", item.ID, werr)
		if err != nil {
			return fmt.Errorf("%w; %w", err, werr)
		}
		return werr
	}
	return err
}

func (s *Sink) write(rec *line) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil { // Encode appends the newline.
		return fmt.Errorf("encode: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return fmt.Errorf("write %s: %w", s.path, os.ErrClosed)
	}
	// One Write of the whole line: with O_APPEND the kernel moves to the
	// end and writes in one step, so lines of concurrent writers, even in
	// other processes, do not interleave.
	_, err := s.f.Write(buf.Bytes()) // a *PathError naming the file
	return err
}

// Close closes the file; it does not close Config.Inner. Close after Close
// returns nil.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	if err != nil {
		return fmt.Errorf("file: close: %w", err)
	}
	return nil
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
