package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/syncd/syncd/store"
)

// itemRow is one item in status output.
type itemRow struct {
	ID          string     `json:"id"`
	State       string     `json:"state"` // due, syncing, claimed, idle, backing off, quarantined
	Owner       string     `json:"owner,omitempty"`
	Manual      bool       `json:"manual,omitempty"` // added by hand: no reconcile removes it
	Fence       uint64     `json:"fence"`
	LastSync    *time.Time `json:"last_sync,omitempty"`
	SinceSync   string     `json:"since_last_sync,omitempty"`
	DueAt       *time.Time `json:"due_at,omitempty"`
	Waiting     string     `json:"waiting,omitempty"` // past due
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error,omitempty"`
	waitingMs   int64
	dueSortable int64
}

type summary struct {
	Items       int    `json:"items"`
	Due         int    `json:"due"`
	InFlight    int    `json:"in_flight"`
	BackingOff  int    `json:"backing_off"`
	Quarantined int    `json:"quarantined"`
	OldestWait  string `json:"oldest_wait"`
	Redis       string `json:"redis"`
	// Damaged lists the shards whose keys are damaged; their items are
	// not counted or shown.
	Damaged []shardDamage `json:"damaged_shards,omitempty"`
	// Shown is how many items are listed when --limit cut the list
	// short; 0 when every item is.
	Shown int `json:"shown,omitempty"`
	// Target is the target's breaker and permits, fleet-wide.
	Target targetSummary `json:"target"`
	// DataLoss is the last time Redis lost the deployment's data.
	DataLoss *store.DataLoss `json:"data_loss,omitempty"`
}

// targetSummary is the target's state in status output.
type targetSummary struct {
	// State is "up", or "unavailable" while the breaker is open.
	State string `json:"state"`
	// Since is when the breaker opened (unavailable) or last closed.
	Since *time.Time `json:"since,omitempty"`
	// For is how long it has been open; NextProbe when the fleet probes.
	For       string     `json:"for,omitempty"`
	NextProbe *time.Time `json:"next_probe,omitempty"`
	// Opens and Closes count the breaker's transitions, fleet-wide.
	Opens  int64 `json:"opens"`
	Closes int64 `json:"closes"`
	// Suspects is how many distinct items failed with no success since.
	Suspects int `json:"suspects"`
	// InFlight is how many max_in_flight permits are held.
	InFlight  int    `json:"in_flight_permits"`
	LastError string `json:"last_error,omitempty"`
}

// targetOf turns the target's state into its status summary.
func targetOf(ts store.TargetState) targetSummary {
	at := func(ms int64) *time.Time {
		if ms <= 0 {
			return nil
		}
		t := time.UnixMilli(ms).UTC()
		return &t
	}
	s := targetSummary{State: "up", Since: at(ts.Since), Opens: ts.Opens, Closes: ts.Closes,
		Suspects: ts.Suspects, InFlight: ts.InFlight}
	if ts.Open {
		s.State, s.NextProbe, s.LastError = "unavailable", at(ts.Next), ts.Reason
		s.For = (time.Duration(max(ts.Now-ts.Since, 0)) * time.Millisecond).Round(time.Second).String()
	}
	return s
}

// line is the target's summary line.
func (s targetSummary) line(now time.Time) string {
	if s.State == "up" {
		return fmt.Sprintf("target: up (breaker opened %d times, %d items failing since the last success, %d permits held)",
			s.Opens, s.Suspects, s.InFlight)
	}
	probe := "now"
	if s.NextProbe != nil && s.NextProbe.After(now) {
		probe = "in " + s.NextProbe.Sub(now).Round(100*time.Millisecond).String()
	}
	return fmt.Sprintf("target: UNAVAILABLE for %s (breaker open since %s; next probe %s; no sync starts and none counts against its item): %s",
		s.For, s.Since.Format(time.RFC3339), probe, shown(s.LastError, 300))
}

// shardDamage is a shard whose keys are damaged, in status output.
type shardDamage struct {
	Shard int    `json:"shard"`
	Error string `json:"error"`
}

// cmdStatus prints every item's state and a summary; it reads Redis only,
// so it works against a live fleet.
func cmdStatus(args []string, stdout, stderr io.Writer) error {
	f := newFlags("status", stderr)
	asJSON := f.fs.Bool("json", false, "print JSON")
	limit := f.fs.Int("limit", 100, "show at most this many items, longest waiting first (0: all)")
	if _, err := f.parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	st, err := adminStore(ctx, f)
	if err != nil {
		return err
	}
	defer st.Close()
	now, err := st.Now(ctx)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	sum := summary{Redis: st.Addr()}
	rows, err := collect(ctx, st, now, &sum)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ts, err := st.TargetState(ctx)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	sum.Target = targetOf(ts)
	if sum.DataLoss, err = st.LastDataLoss(ctx); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	slices.SortStableFunc(rows, func(a, b itemRow) int { return cmpInt(a.dueSortable, b.dueSortable) })
	if *limit > 0 && len(rows) > *limit {
		sum.Shown = *limit
		rows = rows[:*limit]
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []itemRow{}
		}
		return enc.Encode(struct {
			Summary summary   `json:"summary"`
			Items   []itemRow `json:"items"`
		}{sum, rows})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tOWNER\tFENCE\tSINCE SYNC\tWAITING\tATTEMPTS\tLAST ERROR")
	for _, r := range rows {
		id := shown(r.ID, 64)
		if r.Manual {
			id += " (manual)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", id, r.State, dash(shown(r.Owner, 64)), r.Fence,
			dash(r.SinceSync), dash(r.Waiting), r.Attempts, dash(shown(r.LastError, 60)))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d items: %d due, %d in flight, %d backing off, %d quarantined; oldest wait %s (%s)\n",
		sum.Items, sum.Due, sum.InFlight, sum.BackingOff, sum.Quarantined, sum.OldestWait, sum.Redis)
	if sum.Shown > 0 {
		fmt.Fprintf(stdout, "(the %d longest waiting of %d items shown; --limit 0 shows all)\n", sum.Shown, sum.Items)
	}
	fmt.Fprintln(stdout, sum.Target.line(time.UnixMilli(now)))
	if l := sum.DataLoss; l != nil {
		fmt.Fprintf(stdout, "redis lost this deployment's data at %s (%d times): %d items restored from the sources; up to %d in no source (added by hand) were lost\n",
			l.At.UTC().Format(time.RFC3339), l.Count, l.Restored, l.Lost)
	}
	for _, d := range sum.Damaged {
		fmt.Fprintf(stdout, "shard %d damaged, its items are not shown and wait: %s\n", d.Shard, shown(d.Error, 500))
	}
	return nil
}

// collect reads every shard's items and counts them into sum. A shard
// whose keys are damaged is listed in sum.Damaged and skipped.
func collect(ctx context.Context, st *store.Store, now int64, sum *summary) ([]itemRow, error) {
	var rows []itemRow
	var oldest int64
	for sh := range st.Keys().Shards() {
		for off := 0; off >= 0; {
			page, next, err := st.List(ctx, sh, off, 500)
			if errors.Is(err, store.ErrDamaged) {
				sum.Damaged = append(sum.Damaged, shardDamage{Shard: sh, Error: err.Error()})
				break
			}
			if err != nil {
				return nil, err
			}
			off = next
			for _, it := range page {
				r := classify(it, now)
				sum.Items++
				switch r.State {
				case "due":
					sum.Due++
					oldest = max(oldest, r.waitingMs)
				case "syncing", "claimed":
					sum.InFlight++
				case "backing off":
					sum.BackingOff++
				case "quarantined":
					sum.Quarantined++
				}
				rows = append(rows, r)
			}
		}
	}
	sum.OldestWait = (time.Duration(oldest) * time.Millisecond).String()
	return rows, nil
}

func classify(it store.ItemState, now int64) itemRow {
	r := itemRow{ID: it.ID, Fence: it.Fence, Attempts: it.Attempts, LastError: it.Error, dueSortable: it.Due, Manual: it.Manual}
	if !it.LastSync.IsZero() {
		ls := it.LastSync
		r.LastSync = &ls
		r.SinceSync = (time.Duration(now-ls.UnixMilli()) * time.Millisecond).Round(time.Second).String()
	}
	switch {
	case it.Record != nil:
		r.State = it.Record.State.String()
		r.Owner = it.Record.Owner.String()
		r.Fence = it.Record.Fence
	case it.RecordErr != nil:
		r.State = "claimed"
		r.Owner = "(unreadable record)"
	case it.Quarantined:
		r.State = "quarantined"
		r.dueSortable = 1<<62 - 1
	case it.Due <= now:
		r.State = "due"
		r.waitingMs = now - it.Due
		r.Waiting = (time.Duration(r.waitingMs) * time.Millisecond).Round(time.Millisecond).String()
	case it.Attempts > 0:
		r.State = "backing off"
	default:
		r.State = "idle"
	}
	if !it.Quarantined {
		d := time.UnixMilli(it.Due)
		r.DueAt = &d
	}
	return r
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shown makes text read back from Redis safe for a terminal: control
// and other invisible characters are escaped as in Go strings (a planted
// ID must not move the cursor or change colours), and anything past n
// runes is cut, saying how long the whole was.
func shown(s string, n int) string {
	var b strings.Builder
	for i, runes := 0, 0; i < len(s); runes++ {
		if runes == n {
			fmt.Fprintf(&b, "...(%d bytes)", len(s))
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r) || r == ' ':
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
