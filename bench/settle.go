package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/sinks"
)

// The settle section: what a settle delay costs the engine, with the
// scheduler claiming ahead of free workers (engine.Config.ClaimAhead),
// against no settle at all. Issue 13's target: settle 500ms with a 100ms
// sink at 16 workers runs at ≥ 90% of the settle-0 throughput.
const (
	SettleWorkers = 16
	SettleSink    = 100 * time.Millisecond
	SettleDelay   = 500 * time.Millisecond
	SettleGoal    = 0.90
)

// SettleVariant is one configuration measured.
type SettleVariant struct {
	Name       string
	Label      string
	Settle     time.Duration
	ClaimAhead int // engine.Config.ClaimAhead
}

// SettleVariants: no settle; the settle with claim-ahead (the default);
// the settle with claim-ahead off, as the engine ran before it.
var SettleVariants = []SettleVariant{
	{Name: "settle-0", Label: "settle 0", Settle: 0},
	{Name: "ahead", Label: "settle 500ms, claim-ahead on (default)", Settle: SettleDelay},
	{Name: "off", Label: "settle 500ms, claim-ahead off", Settle: SettleDelay, ClaimAhead: engine.ClaimAheadOff},
}

// config is the engine's configuration for v.
func (v SettleVariant) config() engine.Config {
	return engine.Config{Workers: SettleWorkers, Interval: time.Hour, ClaimAhead: v.ClaimAhead,
		Ownership: ownership.Config{TTL: LockTTL, Settle: v.Settle}}
}

// SettleRow is one variant's runs.
type SettleRow struct {
	Variant SettleVariant
	Runs    []E2ERun
}

// SettleResults holds the settle section.
type SettleResults struct {
	Rows      []*SettleRow
	Pool      int
	Warm, Dur time.Duration
}

func (s *SettleResults) row(name string) *SettleRow {
	for _, r := range s.Rows {
		if r.Variant.Name == name {
			return r
		}
	}
	return nil
}

// Ratio is variant a's rate over variant b's, per repetition.
func (s *SettleResults) Ratio(a, b string) Spread {
	ra, rb := s.row(a), s.row(b)
	if ra == nil || rb == nil {
		return spreadOf(nil)
	}
	return runRatio(ra.Runs, rb.Runs)
}

// RunSettle measures each variant reps times, back to back in each
// repetition: SettleWorkers workers, a sink that takes SettleSink, pool
// items (interval 1h: each syncs once), SyncsOK counted over dur after
// warm (which covers the first settle window and claim-ahead's start).
func RunSettle(ctx context.Context, srv *Server, reps, pool int, warm, dur time.Duration, logf func(string, ...any)) (*SettleResults, error) {
	res := &SettleResults{Pool: pool, Warm: warm, Dur: dur}
	for _, v := range SettleVariants {
		res.Rows = append(res.Rows, &SettleRow{Variant: v})
	}
	sink := sinks.Func(func(ctx context.Context, it sinks.Item) error {
		select {
		case <-time.After(SettleSink):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	for rep := range reps {
		for _, row := range res.Rows {
			v := row.Variant
			r, err := runEngineWith(ctx, srv, v.config(), sink, pool, warm, dur)
			if err != nil {
				return nil, fmt.Errorf("settle %s: %w", v.Name, err)
			}
			logf("settle rep %d %-40s %6.1f items/s exhausted=%v", rep+1, v.Label, r.Rate(), r.Exhausted)
			row.Runs = append(row.Runs, r)
		}
	}
	srv.FlushAll(ctx)
	return res, nil
}

// settleTarget is issue 13's settle target.
func (r *Results) settleTarget() Target {
	what := fmt.Sprintf("settle %v, %v sink, %d workers: ≥ %.0f%% of the settle-0 throughput", SettleDelay, SettleSink, SettleWorkers, 100*SettleGoal)
	s := r.Settle
	if s == nil {
		return Target{What: what + " (section not run)"}
	}
	ratio := s.Ratio("ahead", "settle-0")
	return Target{What: what, Known: true, Met: ratio.Med >= SettleGoal,
		Measured: fmt.Sprintf("%s (claim-ahead on); %s with it off", ratioSpread(ratio), ratioSpread(s.Ratio("off", "settle-0")))}
}

func settleSection(b *md, s *SettleResults) {
	b.p("## 4b. Settle delay with claim-ahead")
	b.nl()
	b.p("The engine with %d workers and a sink that takes %v, over %d items pre-added (all due, interval 1h: each syncs once), TTL 30s; `Metrics().SyncsOK` counted over a %v window after %v of warm-up (which covers the first settle window and claim-ahead's start). With a settle delay, a claim waits out its settle window and confirm read on claim-ahead's budget (`engine.Config.ClaimAhead`, default 8 per worker, at least 1024; how many it holds adapts to workers × settle / mean sync), not on a worker; the confirmed leases queue, longest waiting first, for the next free worker. With claim-ahead off, each claim holds its worker through its settle window. The ideal is %d / %v = %.0f items/s. Ratios are taken within a repetition.",
		SettleWorkers, SettleSink, s.Pool, s.Dur, s.Warm, SettleWorkers, SettleSink, float64(SettleWorkers)/SettleSink.Seconds())
	b.nl()
	var rows [][]string
	for _, row := range s.Rows {
		rt := spreadOf(mapRuns(row.Runs, func(x E2ERun) float64 { return float64(x.W.RoundTrips) / float64(max(x.Done, 1)) })).Med
		rows = append(rows, []string{row.Variant.Label, rateSpread(spreadOf(mapRuns(row.Runs, E2ERun.Rate))) + exhausted(&E2ERow{Runs: row.Runs}),
			ratioSpread(s.Ratio(row.Variant.Name, "settle-0")), fmt.Sprintf("%.2f", rt)})
	}
	b.table([]string{"configuration", "items/s", "of settle 0", "round trips/item"}, rows)
}
