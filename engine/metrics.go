package engine

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// Metrics are the engine's counters and gauges, safe to read at any time.
// Collector exposes them to Prometheus, reading them at scrape time.
type Metrics struct {
	SyncsOK, SyncsFailed, SyncsUnrecorded, SyncsLost atomic.Int64
	Quarantined, StaleFences, HandedBack             atomic.Int64
	// SyncsResource counts syncs that failed for lack of a resource of
	// syncd's own (descriptors, memory): handed back, not the item's fault.
	SyncsResource                     atomic.Int64
	InFlight, DueBacklog, OldestDueMs atomic.Int64
	// ShardsDamaged is how many shards are skipped now because their
	// keys are damaged (see Engine.Damaged).
	ShardsDamaged atomic.Int64
	// SyncsUnavailable counts syncs whose failure was put down to the
	// target (see TargetConfig): handed back, not counted against the
	// item.
	SyncsUnavailable atomic.Int64
	// TargetUp is 0 while this process sees the target's breaker open,
	// else 1. TargetOpened and TargetClosed count the transitions this
	// process made; TargetProbes the probes it was granted; TargetWaits
	// the claim rounds the target's limits or breaker held back;
	// PermitsLost the permits that expired while their syncs ran.
	TargetUp, TargetOpened, TargetClosed, TargetProbes, TargetWaits, PermitsLost atomic.Int64
	// DataLosses counts the times this process saw Redis lose the
	// deployment's data (and restored the item set).
	DataLosses atomic.Int64
	// ReconcileOK, ReconcileGuarded and ReconcileFailed count this
	// process's reconciles by result; ReconcileRefusing is 1 while its
	// last reconcile removed nothing because of the guard.
	ReconcileOK, ReconcileGuarded, ReconcileFailed, ReconcileRefusing atomic.Int64
	// AheadLate and AheadLost count leases claimed ahead of a free worker
	// (see Config.ClaimAhead) and handed back without a sync: having
	// waited past their bound, or found lost before a worker took them.
	// Those handed back at shutdown count in HandedBack.
	AheadLate, AheadLost atomic.Int64
	// RedisUp is 1 while the engine's last round trip to Redis (the
	// monitor's, every Poll up to 2s, or the count of items) succeeded,
	// else 0.
	RedisUp atomic.Int64

	own    *ownership.Stats
	items  atomic.Pointer[store.Counts]      // the last count; nil before the first
	target atomic.Pointer[store.TargetState] // the last read; nil before, or with no target

	syncDur   prometheus.Histogram
	leaseLeft prometheus.Histogram
}

// durationBuckets are the upper bounds of the sync duration histogram,
// in seconds.
var durationBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.25, 1, 5, 30, 120}

// leaseLeftBuckets are the upper bounds of the lease-left histogram, in
// seconds: with the default ttl (30s) a heartbeat lands about 17s before
// the trust window closes; under a second is a lease about to be lost.
var leaseLeftBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60}

func newMetrics(own *ownership.Stats) *Metrics {
	m := &Metrics{own: own,
		syncDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "syncd_sync_duration_seconds",
			Help: "Time the sink took per sync.", Buckets: durationBuckets}),
		leaseLeft: newLeaseLeft(),
	}
	m.TargetUp.Store(1)
	return m
}

func newLeaseLeft() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "syncd_lease_left_at_heartbeat_seconds",
		Help: "How long a lease's trust window still had to run when its heartbeat landed.", Buckets: leaseLeftBuckets})
}

func (m *Metrics) observe(d time.Duration) { m.syncDur.Observe(d.Seconds()) }

// Items returns the last count of the items by state (see
// Config.CountInterval), false before the first.
func (m *Metrics) Items() (store.Counts, bool) {
	c := m.items.Load()
	if c == nil {
		return store.Counts{}, false
	}
	return *c, true
}

// family is one metric name: its help, type and how to read each of its
// series from the Metrics.
type family struct {
	name, help string
	kind       prometheus.ValueType
	label      string // "" for a single series
	series     []series
	desc       *prometheus.Desc
}

// series is one labelled series of a family.
type series struct {
	value string // the label's value; "" when the family has no label
	read  func(*Metrics) float64
}

func one(read func(*Metrics) float64) []series { return []series{{read: read}} }

// at reads an atomic counter of the Metrics.
func at(f func(*Metrics) *atomic.Int64) func(*Metrics) float64 {
	return func(m *Metrics) float64 { return float64(f(m).Load()) }
}

// families are the metrics read from the atomics at scrape time. The
// names and labels are the ones syncd has always exposed: dashboards and
// alerts depend on them.
var families = newFamilies([]family{
	{name: "syncd_claims_total", help: "Claims made, by result.", kind: prometheus.CounterValue, label: "result", series: []series{
		{"won", at(func(m *Metrics) *atomic.Int64 { return &m.own.ClaimsWon })},
		{"lost", at(func(m *Metrics) *atomic.Int64 { return &m.own.ClaimsLost })},
		{"unknown", at(func(m *Metrics) *atomic.Int64 { return &m.own.ClaimsUnknown })}}},
	{name: "syncd_syncs_total", help: "Syncs, by outcome.", kind: prometheus.CounterValue, label: "outcome", series: []series{
		{"ok", at(func(m *Metrics) *atomic.Int64 { return &m.SyncsOK })},
		{"failed", at(func(m *Metrics) *atomic.Int64 { return &m.SyncsFailed })},
		{"lease_lost", at(func(m *Metrics) *atomic.Int64 { return &m.SyncsLost })},
		{"unrecorded", at(func(m *Metrics) *atomic.Int64 { return &m.SyncsUnrecorded })},
		{"resource", at(func(m *Metrics) *atomic.Int64 { return &m.SyncsResource })},
		{"stale_fence", at(func(m *Metrics) *atomic.Int64 { return &m.StaleFences })},
		{"handed_back", at(func(m *Metrics) *atomic.Int64 { return &m.HandedBack })},
		{"target_unavailable", at(func(m *Metrics) *atomic.Int64 { return &m.SyncsUnavailable })}}},
	{name: "syncd_target_up", help: "0 while the target's breaker is open (as this process last saw it), else 1.",
		kind: prometheus.GaugeValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.TargetUp }))},
	{name: "syncd_target_transitions_total", help: "Breaker transitions this process made.", kind: prometheus.CounterValue, label: "to", series: []series{
		{"open", at(func(m *Metrics) *atomic.Int64 { return &m.TargetOpened })},
		{"closed", at(func(m *Metrics) *atomic.Int64 { return &m.TargetClosed })}}},
	{name: "syncd_target_probes_total", help: "Probe syncs of an open breaker this process was granted.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.TargetProbes }))},
	{name: "syncd_target_waits_total", help: "Claim rounds held back by the target's rate limit, max_in_flight or breaker.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.TargetWaits }))},
	{name: "syncd_redis_data_losses_total", help: "Times this process saw Redis lose the deployment's data and restored the item set.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.DataLosses }))},
	{name: "syncd_reconciles_total", help: "Reconciles of the item set with its sources this process ran, by result.",
		kind: prometheus.CounterValue, label: "result", series: []series{
			{"ok", at(func(m *Metrics) *atomic.Int64 { return &m.ReconcileOK })},
			{"guarded", at(func(m *Metrics) *atomic.Int64 { return &m.ReconcileGuarded })},
			{"failed", at(func(m *Metrics) *atomic.Int64 { return &m.ReconcileFailed })}}},
	{name: "syncd_reconcile_refusing", help: "1 while the last reconcile removed nothing: a source failed, was empty or would remove more than items.max_removal.",
		kind: prometheus.GaugeValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.ReconcileRefusing }))},
	{name: "syncd_target_permits_lost_total", help: "max_in_flight permits that expired while their syncs ran.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.PermitsLost }))},
	{name: "syncd_claim_ahead_handed_back_total", help: "Leases claimed ahead of a free worker and handed back without a sync, by reason: waited past their bound, or lost before a worker took them.",
		kind: prometheus.CounterValue, label: "reason", series: []series{
			{"waited", at(func(m *Metrics) *atomic.Int64 { return &m.AheadLate })},
			{"lost", at(func(m *Metrics) *atomic.Int64 { return &m.AheadLost })}}},
	{name: "syncd_quarantined_total", help: "Items quarantined after max_attempts or a permanent error.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.Quarantined }))},
	{name: "syncd_items_damaged_total", help: "Items a claim quarantined because their state in Redis is damaged, by what.",
		kind: prometheus.CounterValue, label: "reason", series: []series{
			{"fence", at(func(m *Metrics) *atomic.Int64 { return &m.own.DamagedFences })},
			{"id", at(func(m *Metrics) *atomic.Int64 { return &m.own.DamagedIDs })},
			{"wrong_shard", at(func(m *Metrics) *atomic.Int64 { return &m.own.WrongShard })}}},
	{name: "syncd_lease_losses_total", help: "Leases lost, by reason.", kind: prometheus.CounterValue, label: "reason", series: []series{
		{"taken", at(func(m *Metrics) *atomic.Int64 { return &m.own.LostTaken })},
		{"deleted", at(func(m *Metrics) *atomic.Int64 { return &m.own.LostDeleted })},
		{"expired", at(func(m *Metrics) *atomic.Int64 { return &m.own.LostExpired })},
		{"unreachable", at(func(m *Metrics) *atomic.Int64 { return &m.own.LostUnreachable })}}},
	{name: "syncd_heartbeats_total", help: "Heartbeat round trips.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.own.Heartbeats }))},
	{name: "syncd_heartbeat_errors_total", help: "Heartbeat round trips that failed.",
		kind: prometheus.CounterValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.own.HeartbeatErrors }))},
	{name: "syncd_in_flight", help: "Syncs running now in this process.",
		kind: prometheus.GaugeValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.InFlight }))},
	{name: "syncd_due_backlog", help: "Items due now, fleet-wide.",
		kind: prometheus.GaugeValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.DueBacklog }))},
	{name: "syncd_shards_damaged", help: "Shards with a damaged key, whose items wait (see /readyz).",
		kind: prometheus.GaugeValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.ShardsDamaged }))},
	{name: "syncd_oldest_due_seconds", help: "How long the oldest due item has waited past due, fleet-wide.",
		kind: prometheus.GaugeValue, series: one(func(m *Metrics) float64 { return float64(m.OldestDueMs.Load()) / 1000 })},
	{name: "syncd_redis_up", help: "1 while the last round trip to Redis succeeded, else 0.",
		kind: prometheus.GaugeValue, series: one(at(func(m *Metrics) *atomic.Int64 { return &m.RedisUp }))},
})

func newFamilies(fs []family) []family {
	for i := range fs {
		var labels []string
		if fs[i].label != "" {
			labels = []string{fs[i].label}
		}
		fs[i].desc = prometheus.NewDesc(fs[i].name, fs[i].help, labels, nil)
	}
	return fs
}

// The descriptions of the metrics that are not read from one atomic.
var (
	itemsDesc = prometheus.NewDesc("syncd_items",
		"Items by state, fleet-wide, counted per shard every engine.Config.CountInterval: all, and those due, in flight, backing off and quarantined; backing_off overlaps the others (failing items, due or in flight ones among them).",
		[]string{"state"}, nil)
	targetOpenDesc = prometheus.NewDesc("syncd_target_open",
		"1 while the target's breaker is open, fleet-wide (read with syncd_items), else 0.", nil, nil)
	targetSuspectsDesc = prometheus.NewDesc("syncd_target_suspects",
		"Distinct items that failed, unclassified, with no success since: the breaker opens at target.breaker.failures.", nil, nil)
	targetPermitsDesc = prometheus.NewDesc("syncd_target_permits_in_use",
		"max_in_flight permits held, fleet-wide.", nil, nil)
	buildInfoDesc = prometheus.NewDesc("syncd_build_info", "syncd's version and the Go version it was built with; always 1.",
		[]string{"version", "goversion"}, nil)
)

// familyDesc returns the description of the family called name.
func familyDesc(name string) *prometheus.Desc {
	for _, f := range families {
		if f.name == name {
			return f.desc
		}
	}
	panic("engine: no metric family " + name) // a typo in this package
}

// Collector exposes an engine's metrics to Prometheus: register it on a
// prometheus.Registry. It reads the engine's counters when scraped, so
// it never counts anything twice and costs nothing between scrapes.
type Collector struct {
	m       *Metrics
	version string
}

// Collector returns a Collector of e's metrics, for a registry of the
// caller's. Handler and Endpoints register one themselves, with the Go
// and process collectors.
func (e *Engine) Collector() *Collector {
	return &Collector{m: e.m, version: cmp.Or(e.cfg.Version, moduleVersion())}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range families {
		ch <- f.desc
	}
	ch <- itemsDesc
	ch <- targetOpenDesc
	ch <- targetSuspectsDesc
	ch <- targetPermitsDesc
	ch <- buildInfoDesc
	c.m.syncDur.Describe(ch)
	c.m.leaseLeft.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range families {
		for _, s := range f.series {
			var labels []string
			if f.label != "" {
				labels = []string{s.value}
			}
			ch <- prometheus.MustNewConstMetric(f.desc, f.kind, s.read(c.m), labels...)
		}
	}
	if n, ok := c.m.Items(); ok {
		for _, s := range []struct {
			state string
			n     int64
		}{{"all", n.Items}, {"due", n.Due}, {"in_flight", n.InFlight}, {"backing_off", n.BackingOff}, {"quarantined", n.Quarantined}} {
			ch <- prometheus.MustNewConstMetric(itemsDesc, prometheus.GaugeValue, float64(s.n), s.state)
		}
	}
	if ts := c.m.target.Load(); ts != nil {
		ch <- prometheus.MustNewConstMetric(targetOpenDesc, prometheus.GaugeValue, b2f(ts.Open))
		ch <- prometheus.MustNewConstMetric(targetSuspectsDesc, prometheus.GaugeValue, float64(ts.Suspects))
		ch <- prometheus.MustNewConstMetric(targetPermitsDesc, prometheus.GaugeValue, float64(ts.InFlight))
	}
	ch <- buildInfo(c.version)
	c.m.syncDur.Collect(ch)
	c.m.leaseLeft.Collect(ch)
}

func buildInfo(version string) prometheus.Metric {
	return prometheus.MustNewConstMetric(buildInfoDesc, prometheus.GaugeValue, 1, version, runtime.Version())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// moduleVersion is syncd's module version as the Go toolchain recorded
// it: syncd's own when it is the main module ("(devel)" for a plain
// build), the dependency's in a program that imports the engine.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == "github.com/syncd/syncd" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/syncd/syncd" {
			return d.Version
		}
	}
	return "unknown"
}
