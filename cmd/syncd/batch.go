package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/engine"
)

// cmdBatch syncs every item once and exits: 0 when every item synced, 1
// when some failed for good or were quarantined, 2 on bad config or an
// unreachable Redis.
func cmdBatch(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("batch", stderr)
	defer f.explain(&err)
	report := f.fs.String("report", "", "write the report as JSON to this file")
	maxDown := f.fs.Duration("max-unavailable", 10*time.Minute, "end the run when the target stayed unavailable (its breaker open) this long; 0: wait for ever")
	if err := f.parseNone(args); err != nil {
		return err
	}
	if *maxDown < 0 {
		// The engine reads any value below 1 as 0: a run that waits for
		// the target for ever, which -1s did without a word (an outside
		// trial).
		return usageErr("--max-unavailable %v is negative: give how long the target may stay unavailable, or 0 to wait for it for ever", *maxDown)
	}
	cfg, err := f.loadRunner()
	if err != nil {
		return err
	}
	if err := checkSink(cfg); err != nil {
		return err
	}
	var rf *reportFile
	if *report != "" {
		if rf, err = openReport(*report); err != nil {
			return err
		}
		defer rf.abandon()
	}
	log := newLogger(cfg, os.Stderr)
	logConfigWarnings(cfg, log)
	ctx, stop := stopOnSignal(log, "stopping the batch run: draining in-flight syncs; items not synced are left for the next run (signal again to exit at once)")
	defer stop()
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	e, done, err := tracedEngine(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	defer done()
	prog := newProgress(os.Stderr, log)
	rep, err := e.RunBatch(ctx, engine.BatchOptions{OnProgress: prog.update, MaxUnavailable: *maxDown})
	prog.finish()
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	writeSummary(stdout, rep)
	if rf != nil {
		if err := rf.write(rep); err != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("--report: %w", err)}
		}
	}
	if !rep.OK() {
		return &exitError{code: exitFailed, err: fmt.Errorf("%d items quarantined, %d not synced, %d shards damaged, %d copies in the wrong shard",
			rep.Quarantined, rep.Unsynced, len(rep.Damaged), rep.WrongShardCount)}
	}
	return nil
}

// reportFile is --report's file, opened before the run so that a path
// that cannot be written is refused at once, with the usage code: it was
// opened after the run, which then ended in "--report: open ...: no such
// file or directory" and exit 1, the code of "some quarantined" (an
// outside trial: 100 items synced over 14 s first).
type reportFile struct {
	f       *os.File
	created bool // by this run: removed if no report is written
	written bool
}

func openReport(path string) (*reportFile, error) {
	_, statErr := os.Stat(path)
	// No O_TRUNC: a report from an earlier run stays until this one's is
	// written.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, usageErr("--report %s: %v", path, errors.Unwrap(err))
	}
	return &reportFile{f: f, created: errors.Is(statErr, fs.ErrNotExist)}, nil
}

// write replaces the file's content with r as JSON (durations in ms). A
// file that is no regular one (/dev/stdout, a pipe) is written to as it
// is.
func (rf *reportFile) write(r *engine.Report) error {
	b, _ := json.MarshalIndent(r, "", "  ")
	if fi, err := rf.f.Stat(); err == nil && fi.Mode().IsRegular() {
		if err := rf.f.Truncate(0); err != nil {
			return err
		}
	}
	rf.written = true
	_, err := rf.f.Write(append(b, '\n'))
	return errors.Join(err, rf.f.Close())
}

// abandon closes the file, and removes it when this run created it and
// wrote no report.
func (rf *reportFile) abandon() {
	if rf.written {
		return
	}
	rf.f.Close()
	if rf.created {
		os.Remove(rf.f.Name())
	}
}

func writeSummary(w io.Writer, r *engine.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	took := r.Finished.Sub(r.Started)
	rate := 0.0
	if took > 0 {
		rate = float64(r.Synced) / took.Seconds()
	}
	fmt.Fprintf(tw, "items\t%d\n", r.Items)
	fmt.Fprintf(tw, "synced here\t%d\t(%.1f/s)\n", r.Synced, rate)
	fmt.Fprintf(tw, "synced by other processes\t%d\n", r.SyncedElsewhere)
	fmt.Fprintf(tw, "failed attempts\t%d\n", r.Failed)
	ids := make([]string, len(r.QuarantinedIDs))
	for i, id := range r.QuarantinedIDs {
		ids[i] = shown(id, 64) // read back from Redis: may be planted
	}
	fmt.Fprintf(tw, "quarantined\t%d\t%s\n", r.Quarantined, strings.Join(ids, " "))
	if r.WrongShardCount > 0 {
		// Not items: their ids' real items are counted above.
		copies := make([]string, len(r.WrongShard))
		for i, c := range r.WrongShard {
			copies[i] = fmt.Sprintf("%s (shard %d)", shown(c.ID, 64), c.Shard)
		}
		fmt.Fprintf(tw, "wrong shard\t%d\t%s\t(copies %s; %s)\n", r.WrongShardCount, strings.Join(copies, " "), wrongShardWhat, wrongShardFix)
	}
	fmt.Fprintf(tw, "not synced\t%d\n", r.Unsynced)
	if r.GaveUp != "" {
		fmt.Fprintf(tw, "gave up\t%s\n", shown(api.TargetError(r.GaveUp), 500))
	}
	if r.TargetUnavailable > 0 {
		fmt.Fprintf(tw, "target unavailable\t%v\t(breaker open: no sync started, none counted)\n", r.TargetUnavailable.Round(time.Millisecond))
	}
	for _, d := range r.Damaged {
		fmt.Fprintf(tw, "damaged, not counted\t%s\n", shown(d, 300))
	}
	fmt.Fprintf(tw, "took\t%v\n", took.Round(time.Millisecond))
	if r.Synced == 0 {
		// Durations are of this process's syncs that succeeded: "0s" read
		// as instant syncs (an outside trial, every attempt failed).
		fmt.Fprintf(tw, "sync p50 / p99 / max\t-\t(no sync succeeded in this process)\n")
	} else {
		fmt.Fprintf(tw, "sync p50 / p99 / max\t%v / %v / %v\n", r.SyncP50.Round(time.Microsecond), r.SyncP99.Round(time.Microsecond), r.SyncMax.Round(time.Microsecond))
	}
	tw.Flush()
}

// progress shows a bar on a terminal and a log line every few seconds
// otherwise.
type progress struct {
	w     *os.File
	tty   bool
	log   zerolog.Logger
	mu    sync.Mutex
	last  time.Time
	shown bool
}

func newProgress(w *os.File, log zerolog.Logger) *progress {
	return &progress{w: w, tty: isTerminal(w), log: log}
}

func (p *progress) update(pr engine.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	every := 5 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	if time.Since(p.last) < every {
		return
	}
	p.last = time.Now()
	done := pr.Done + pr.Quarantined
	rate := float64(pr.Done) / max(pr.Elapsed.Seconds(), 0.001) // the whole fleet's rate
	eta := "?"
	if rate > 0 && pr.Pending > 0 {
		eta = (time.Duration(float64(pr.Pending)/rate) * time.Second).Round(time.Second).String()
	}
	if !p.tty {
		p.log.Info().Int("done", done).Int("total", pr.Total).Int("pending", pr.Pending).
			Float64("rate", math.Round(rate*10)/10).Str("eta", eta).Msg("batch progress") // items/s, to 0.1 as the summary
		return
	}
	const width = 30
	filled := 0
	if pr.Total > 0 {
		filled = width * done / pr.Total
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d  %.0f/s  eta %s   ", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), done, pr.Total, rate, eta)
	p.shown = true
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprintln(p.w)
	}
}
