package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/store"
)

// itemRow is one item in status output.
type itemRow struct {
	ID    string `json:"id"`
	Shard int    `json:"shard"` // the API's: two rows with one id differ in it
	// State is the API's: due, in_flight, backing_off, quarantined or
	// waiting; Phase, in flight, the claim's: claimed or syncing.
	State     string     `json:"state"`
	Phase     string     `json:"phase,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	Manual    bool       `json:"manual,omitempty"` // added by hand: no reconcile removes it
	Fence     uint64     `json:"fence"`
	LastSync  *time.Time `json:"last_sync,omitempty"`
	SinceSync string     `json:"since_last_sync,omitempty"`
	DueAt     *time.Time `json:"due_at,omitempty"`
	Waiting   string     `json:"waiting,omitempty"` // past due
	Attempts  int        `json:"attempts"`
	LastError string     `json:"last_error,omitempty"`
}

// summary is status's summary, its counts api.Summary's: BackingOff is
// a subset of the items, which overlaps Due and InFlight.
type summary struct {
	Items       int64  `json:"items"`
	Due         int64  `json:"due"`
	InFlight    int64  `json:"in_flight"`
	BackingOff  int64  `json:"backing_off"`
	Quarantined int64  `json:"quarantined"`
	OldestWait  string `json:"oldest_wait"`
	OldestDueMs int64  `json:"oldest_due_ms"`
	Daemons     int    `json:"daemons"`
	Workers     int    `json:"workers"`
	Redis       string `json:"redis"`
	// Damaged lists the shards whose keys are damaged; their items are
	// not counted or shown.
	Damaged []shardDamage `json:"damaged_shards,omitempty"`
	// Shown is how many items are listed when the list was cut short
	// (--limit); 0 when every item that matches is. NextCursor goes on
	// from there (--cursor); Partial says the scan budget ran out first.
	Shown      int    `json:"shown,omitempty"`
	NextCursor string `json:"next_cursor,omitempty"`
	Partial    bool   `json:"partial,omitempty"`
	// Target is the target's breaker and permits, fleet-wide.
	Target targetSummary `json:"target"`
	// DataLoss is the last time Redis lost the deployment's data, as the
	// API summary read it (api.Summary.DataLoss).
	DataLoss *store.DataLoss `json:"data_loss,omitempty"`
	// HeldOffShards counts the shards whose claims wait out a hold-off
	// (after Redis lost its data, or on a new deployment), for
	// HeldOffLeftMs more at most.
	HeldOffShards int   `json:"held_off_shards,omitempty"`
	HeldOffLeftMs int64 `json:"held_off_left_ms,omitempty"`
	// RedisOutOfMemory names each Redis master that refuses writes for
	// lack of memory (maxmemory reached under noeviction): the daemons
	// cannot claim or register there, so Daemons and Workers may count
	// too few. Absent while every master takes writes.
	RedisOutOfMemory []string `json:"redis_out_of_memory,omitempty"`
	// WrongShard counts the copies of items planted in another shard
	// than their ids', quarantined there, which Items and Quarantined
	// leave out (api.Summary.WrongShard); WrongShardPartial says there
	// may be more.
	WrongShard        int  `json:"wrong_shard_count,omitempty"`
	WrongShardPartial bool `json:"wrong_shard_partial,omitempty"`
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
		s.State, s.NextProbe, s.LastError = "unavailable", at(ts.Next), api.TargetError(ts.Reason)
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
	// ErrorsLost: only the shard's err hash is damaged; its items sync
	// and are shown, without their last errors.
	ErrorsLost bool `json:"errors_lost,omitempty"`
}

// watchValue is err, the usage error for the unexpected argument arg,
// or, when arg is a duration that came right after --watch, one that
// says how to give it: `status --watch 5s` said only `unexpected
// argument "5s"` (an outside trial).
func watchValue(args []string, arg string, err error) error {
	for i, a := range args[:len(args)-1] {
		if (a == "--watch" || a == "-watch") && args[i+1] == arg {
			if _, perr := time.ParseDuration(arg); perr == nil {
				return usageErr("unexpected argument %q: give --watch its interval with =, as --watch=%s", arg, arg)
			}
		}
	}
	return err
}

// watchFlag is --watch, alone (every 2 s) or with an interval
// (--watch=5s). The first bad interval is kept in err for the command to
// report after parsing, as a usage error of its own: package flag words
// any error of a bool flag's Set as `invalid boolean value "0s" for
// -watch`, which --watch=0s said (an outside trial).
type watchFlag struct {
	every time.Duration
	err   error
}

func (w *watchFlag) IsBoolFlag() bool { return true }

func (w *watchFlag) String() string {
	if w == nil || w.every == 0 {
		return ""
	}
	return w.every.String()
}

func (w *watchFlag) Set(v string) error {
	switch v {
	case "true":
		w.every = 2 * time.Second
	case "false":
		w.every = 0
	default:
		d, err := time.ParseDuration(v)
		switch {
		case w.err != nil: // the first bad one is told
		case err != nil:
			w.err = usageErr("--watch: %q is not a duration: give one of at least 100ms, such as --watch=5s", v)
		case d < 100*time.Millisecond:
			w.err = usageErr("--watch: %s is too short: give a duration of at least 100ms", v)
		}
		w.every = d
	}
	return nil
}

// statusOpts are status's flags.
type statusOpts struct {
	asJSON bool
	query  store.ListQuery
	limit  int
}

// cmdStatus prints a summary and the longest-waiting items; it reads
// Redis only, so it works against a live fleet. It reads what the API
// serves (api.ReadSummary, store.ListPage), so the two always agree, at
// a bounded cost whatever the set's size.
func cmdStatus(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("status", stderr)
	defer f.explain(&err)
	var o statusOpts
	var watch watchFlag
	f.fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.fs.IntVar(&o.limit, "limit", 100, "show at most this many items, longest waiting first (0: all)")
	f.fs.StringVar(&o.query.Cursor, "cursor", "", "go on from where a cut list stopped (its next cursor)")
	f.fs.StringVar(&o.query.State, "state", "", "show only items in this state: due, in_flight, backing_off, quarantined or waiting")
	f.fs.StringVar(&o.query.Prefix, "prefix", "", "show only items whose ID starts with this")
	f.fs.Var(&watch, "watch", "redraw every 2s (--watch=5s: every 5s) until Ctrl-C")
	rest, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return watchValue(args, rest[0], f.unexpected(rest, "no arguments"))
	}
	if watch.err != nil {
		return watch.err
	}
	if o.limit < 0 {
		return usageErr("--limit %d is negative", o.limit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if watch.every == 0 {
		st, err := adminReadStore(ctx, f, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
		unshown, err := statusOnce(ctx, st, o, stdout)
		if err != nil {
			return err
		}
		return unshown
	}
	st, err := adminOpenRead(ctx, f, stderr) // no deployment yet: watchStatus waits
	if err != nil {
		return err
	}
	defer st.Close()
	return watchStatus(ctx, st, o, watch.every, stdout)
}

// watchStatus redraws status every interval until ctx ends. Until Redis
// holds the deployment (store.ReadDeployed), it says that it waits for
// one, where status --watch on an empty Redis (a fleet not started yet)
// ended at once with "no deployment", as status does without --watch.
// Only a terminal is cleared before each refresh; to a file or a pipe
// each is written after the last (newRefresh), where the escapes that
// clear a screen were written into the file (an outside trial).
//
// Each refresh is read whole before it is written, within watchTimeout:
// while Redis does not answer (a hang, a network cut), a refresh says so
// and the watch goes on, where the last refresh stayed on screen for as
// long as go-redis retried (10 s of a 14 s hang, an outside trial).
func watchStatus(ctx context.Context, st *store.Store, o statusOpts, every time.Duration, stdout io.Writer) error {
	deployed := st.Deployed()
	refresh := newRefresh(stdout, o.asJSON)
	for {
		var frame bytes.Buffer
		fctx, cancel := context.WithTimeout(ctx, watchTimeout)
		var err error
		if !deployed {
			deployed, err = st.ReadDeployed(fctx)
			if err != nil {
				err = &exitError{code: exitUsage, err: err}
			}
		}
		if err == nil {
			if deployed {
				_, err = statusOnce(fctx, st, o, &frame) // a watch goes on past damage
			} else {
				err = printWaiting(st, o, every, &frame)
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil && store.IsUnavailable(err) { // a deadline passed too
			frame.Reset()
			err = printUnanswered(st, o, err, every, &frame)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		refresh()
		frame.WriteTo(stdout)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// watchTimeout bounds the reads of one refresh of status --watch.
const watchTimeout = 3 * time.Second

// printUnanswered is status --watch's refresh while Redis does not
// answer, in text or JSON.
func printUnanswered(st *store.Store, o statusOpts, err error, every time.Duration, w io.Writer) error {
	why := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		why = fmt.Sprintf("no answer within %v", watchTimeout)
	}
	msg := fmt.Sprintf("redis (%s) not answering: %s; trying again every %v", st.Addr(), why, every)
	if o.asJSON {
		return json.NewEncoder(w).Encode(struct {
			Error string `json:"error"`
		}{msg})
	}
	_, err = fmt.Fprintln(w, msg)
	return err
}

// newRefresh returns what status --watch writes before each refresh: on
// a terminal, the escapes that move home and clear the screen; to
// anything else, text gets a line with the time (after a blank line from
// the second on), and JSON nothing, since each refresh is one JSON
// document of its own, as jq reads a stream.
func newRefresh(stdout io.Writer, asJSON bool) func() {
	if f, ok := stdout.(*os.File); ok && isTerminal(f) {
		return func() { fmt.Fprint(stdout, "\x1b[H\x1b[2J") }
	}
	if asJSON {
		return func() {}
	}
	first := true
	return func() {
		if !first {
			fmt.Fprintln(stdout)
		}
		first = false
		fmt.Fprintf(stdout, "status at %s\n", time.Now().UTC().Format(time.RFC3339))
	}
}

// printWaiting says that status --watch waits for the deployment, and
// where (as noDeployment says it), in text or JSON.
func printWaiting(st *store.Store, o statusOpts, every time.Duration, stdout io.Writer) error {
	msg := fmt.Sprintf("waiting for a deployment in %s: syncd run or syncd items add creates it (check redis.addrs, redis.db and redis.key_prefix); looking again every %v",
		deploymentAt(st), every)
	if o.asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Waiting string `json:"waiting"`
		}{msg})
	}
	_, err := fmt.Fprintln(stdout, msg)
	return err
}

// statusOnce reads and prints status once. Its first result is the
// error status exits with once it printed (unshown), nil when every item
// could be shown: a shard whose keys are damaged leaves its items out,
// but one whose err hash alone is damaged does not (its items are shown,
// without their last errors).
func statusOnce(ctx context.Context, st *store.Store, o statusOpts, stdout io.Writer) (unshown, err error) {
	as, err := api.ReadSummary(ctx, st)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	sum := summaryOf(as, st.Addr())
	rows, err := statusRows(ctx, st, o, &sum)
	if err != nil {
		return nil, err
	}
	unshown = unshownErr(sum.Damaged)
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return unshown, enc.Encode(struct {
			Summary summary   `json:"summary"`
			Items   []itemRow `json:"items"`
		}{sum, rows})
	}
	printStatus(stdout, sum, rows, o, as.NowMs)
	return unshown, nil
}

// unshownErr is status's exit when damaged shards left items out: 1,
// as items list's, and a line on stderr after the output naming the
// shards, nil when every shard's items were shown (an err hash alone
// damaged loses only last errors). Before, status exited 0 while it
// printed that a shard's items "are not shown, and wait".
func unshownErr(damaged []shardDamage) error {
	var shards []string
	for _, d := range damaged {
		if !d.ErrorsLost {
			shards = append(shards, strconv.Itoa(d.Shard))
		}
	}
	if shards == nil {
		return nil
	}
	noun := "shard " + strings.Join(shards, ", ")
	if len(shards) > 1 {
		noun = "shards " + strings.Join(shards, ", ")
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("not every item was shown: the items of damaged %s are left out (and wait); fix or delete the key named above", noun)}
}

// summaryOf is the status summary of what ReadSummary read.
func summaryOf(as api.Summary, addr string) summary {
	sum := summary{Items: as.Items, Due: as.Due, InFlight: as.InFlight, BackingOff: as.BackingOff,
		Quarantined: as.Quarantined, OldestDueMs: as.OldestDueMs, Daemons: as.Daemons, Workers: as.Workers,
		Redis: addr, Target: targetOf(as.TargetState), RedisOutOfMemory: as.RedisOutOfMemory,
		WrongShard: as.WrongShard, WrongShardPartial: as.WrongShardPartial, DataLoss: as.DataLoss}
	sum.OldestWait = (time.Duration(as.OldestDueMs) * time.Millisecond).String()
	if as.HeldOffShards > 0 {
		sum.HeldOffShards, sum.HeldOffLeftMs = as.HeldOffShards, max(as.HeldOffUntilMs-as.NowMs, 0)
	}
	for _, err := range as.DamagedShards {
		var d *store.DamageError
		if errors.As(err, &d) {
			sum.Damaged = append(sum.Damaged, shardDamage{Shard: d.Shard, Error: api.Plain(err, ""), ErrorsLost: d.ErrorsLost})
		}
	}
	return sum
}

// statusRows pages through store.ListPage until o.limit items (0: all
// that match), noting in sum where it stopped.
func statusRows(ctx context.Context, st *store.Store, o statusOpts, sum *summary) ([]itemRow, error) {
	rows := []itemRow{}
	q := o.query
	for {
		want := store.ListLimitMax
		if o.limit > 0 {
			want = min(o.limit-len(rows), want)
		}
		q.Limit = want
		p, err := st.ListPage(ctx, q)
		if err != nil && !errors.Is(err, store.ErrDamaged) {
			if errors.Is(err, store.ErrBadQuery) || errors.Is(err, store.ErrBadCursor) {
				return nil, usageErr("%v", err)
			}
			return nil, &exitError{code: exitUsage, err: err}
		}
		for _, it := range p.Items {
			rows = append(rows, rowOf(it, p.Now))
		}
		sum.NextCursor, sum.Partial, q.Cursor = p.Next, p.Partial, p.Next
		if p.Next == "" || o.limit > 0 && len(rows) >= o.limit {
			break
		}
	}
	if sum.NextCursor != "" {
		sum.Shown = len(rows)
	}
	return rows, nil
}

// rowOf is one item's status row: the API's view of it.
func rowOf(it store.ItemState, now int64) itemRow {
	a := api.ItemOf(it, now)
	r := itemRow{ID: a.ID, Shard: a.Shard, State: a.State, Owner: a.Owner, Manual: a.Manual, Fence: a.Fence, Attempts: a.Attempts,
		LastError: a.LastError}
	if it.Record != nil {
		r.Phase = it.Record.State.String()
	}
	if !it.LastSync.IsZero() {
		ls := it.LastSync
		r.LastSync = &ls
		r.SinceSync = (time.Duration(now-ls.UnixMilli()) * time.Millisecond).Round(time.Second).String()
	}
	if a.State == store.ItemDue {
		r.Waiting = (time.Duration(a.WaitMs) * time.Millisecond).Round(time.Millisecond).String()
	}
	if !it.Quarantined {
		d := time.UnixMilli(it.Due)
		r.DueAt = &d
	}
	return r
}

// lastErrorShown is how much of an item's last error status's table
// shows: the whole of the error a claim gives an item planted in another
// shard, fix included, at any shard count (66 runes at 1024 shards).
const lastErrorShown = 72

// printStatus prints the table and the summary.
func printStatus(stdout io.Writer, sum summary, rows []itemRow, o statusOpts, now int64) {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tOWNER\tFENCE\tSINCE SYNC\tWAITING\tATTEMPTS\tLAST ERROR")
	for _, r := range rows {
		id, state := shown(r.ID, 64), r.State
		if r.Manual {
			id += " (manual)"
		}
		if r.Phase != "" {
			state += " (" + r.Phase + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", id, state, dash(shown(r.Owner, 64)), r.Fence,
			dash(r.SinceSync), dash(r.Waiting), r.Attempts, dash(shown(r.LastError, lastErrorShown)))
	}
	tw.Flush()
	// Backing off is no state of its own but a subset of the items
	// (summary.BackingOff): "10 due, 4 backing off" of 10 items read as
	// 14 (an outside trial).
	fmt.Fprintf(stdout, "\n%s: %d due, %d in flight, %d quarantined; %d of the %d backing off after a failure (those due or in flight counted there too); oldest wait %s; %s, %s (%s)\n",
		count(sum.Items, "item"), sum.Due, sum.InFlight, sum.Quarantined, sum.BackingOff, sum.Items, sum.OldestWait,
		count(sum.Daemons, "daemon"), count(sum.Workers, "worker"), sum.Redis)
	for _, addr := range sum.RedisOutOfMemory {
		// Said right under the count it puts in doubt: the registry
		// entries expire, so a fleet out of memory read as no daemons
		// (an outside trial).
		fmt.Fprintf(stdout, "warning: redis %s is out of memory (maxmemory reached, maxmemory-policy noeviction) and refuses writes: daemons cannot claim, release or register, so the daemon count may be low; free memory or raise maxmemory\n", addr)
	}
	if sum.WrongShard > 0 {
		fmt.Fprintln(stdout, wrongShardLine(sum.WrongShard, sum.WrongShardPartial))
	}
	if sum.NextCursor != "" {
		of := "more"
		if o.query.State == "" && o.query.Prefix == "" && o.query.Cursor == "" {
			// The rows are the copies' too: "showing 7 of 6 items".
			of = strconv.FormatInt(sum.Items+int64(sum.WrongShard), 10)
		}
		items := "items"
		if sum.WrongShard > 0 {
			items = "items and copies"
		}
		more := ""
		if sum.Partial {
			more = " (the scan budget ran out: more may match)"
		}
		fmt.Fprintf(stdout, "showing %d of %s %s%s; use --limit (0: all) or --cursor %s\n", sum.Shown, of, items, more, sum.NextCursor)
	}
	fmt.Fprintln(stdout, sum.Target.line(time.UnixMilli(now)))
	if sum.HeldOffShards > 0 {
		fmt.Fprintf(stdout, "claims wait: %s held off for up to %v more, until no lease from before can be trusted (Redis lost its data, or the deployment is new: it waits one ttl)\n",
			count(sum.HeldOffShards, "shard"), (time.Duration(sum.HeldOffLeftMs) * time.Millisecond).Round(100*time.Millisecond))
	}
	if l := sum.DataLoss; l != nil {
		// The record lives in Redis, so a loss takes the record of the
		// ones before with it: its count says little, and the daemons'
		// syncd_redis_data_losses_total counts them all.
		lost := "none added by hand was lost"
		if l.Lost > 0 {
			lost = fmt.Sprintf("up to %s added by hand (in no source) were lost", count(l.Lost, "item"))
		}
		at := "at an unknown time" // a record from before its time was kept
		if !l.At.IsZero() {
			at = "at " + l.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "redis last lost this deployment's data %s: %s restored from the sources; %s\n",
			at, count(l.Restored, "item"), lost)
	}
	for _, d := range sum.Damaged {
		// The error says which shard, which key, and (for an err hash)
		// that the items sync: it was said twice (an outside trial).
		line := shown(d.Error, 500)
		if !d.ErrorsLost {
			line += "; its items are not shown, and wait"
		}
		fmt.Fprintln(stdout, line)
	}
}

// wrongShardLine says how many copies of items are planted in another
// shard than their ids', in the batch report's words: status counted
// them as items, and quarantined ones, and said nothing of them.
func wrongShardLine(n int, partial bool) string {
	copies, more := "1 copy", ""
	if n != 1 {
		copies = strconv.Itoa(n) + " copies"
	}
	if partial {
		copies = "at least " + copies
		more = fmt.Sprintf(" (it reads at most %d quarantined entries, spread over the shards: more may be counted above as items)", store.WrongShardScanBudget)
	}
	return fmt.Sprintf("wrong shard: %s %s%s; %s", copies, wrongShardWhat, more, wrongShardFix)
}

// wrongShardWhat and wrongShardFix say what a copy planted in another
// shard is and what to do of it, in status and in the batch report.
const (
	wrongShardWhat = "planted in another shard than their id's, quarantined there"
	wrongShardFix  = "the real items are counted above; syncd items remove --shard N removes one"
)

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shown is api.Shown: text from Redis made safe for a terminal.
func shown(s string, n int) string { return api.Shown(s, n) }

// count is api.Count: "1 daemon", "2 daemons".
func count[N int | int64](n N, noun string) string { return api.Count(n, noun) }
