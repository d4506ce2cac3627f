package engine

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd/syncd/ownership"
)

// Metrics are the engine's counters and gauges, safe to read at any time.
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

	own *ownership.Stats

	mu      sync.Mutex
	buckets []int64 // one per bound, then +Inf
	sum     time.Duration
	count   int64
}

// durationBuckets are the upper bounds of the sync duration histogram.
var durationBuckets = []time.Duration{
	time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute,
}

func newMetrics(own *ownership.Stats) *Metrics {
	m := &Metrics{own: own, buckets: make([]int64, len(durationBuckets)+1)}
	m.TargetUp.Store(1)
	return m
}

func (m *Metrics) observe(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(durationBuckets) && d > durationBuckets[i] {
		i++
	}
	m.buckets[i]++
	m.sum += d
	m.count++
}

// WritePrometheus writes the metrics in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	type metric struct {
		name, help, kind string
		labels           string
		v                int64
	}
	o := m.own
	ms := []metric{
		{"syncd_claims_total", "Claims made, by result.", "counter", `result="won"`, o.ClaimsWon.Load()},
		{"syncd_claims_total", "", "", `result="lost"`, o.ClaimsLost.Load()},
		{"syncd_claims_total", "", "", `result="unknown"`, o.ClaimsUnknown.Load()},
		{"syncd_syncs_total", "Syncs, by outcome.", "counter", `outcome="ok"`, m.SyncsOK.Load()},
		{"syncd_syncs_total", "", "", `outcome="failed"`, m.SyncsFailed.Load()},
		{"syncd_syncs_total", "", "", `outcome="lease_lost"`, m.SyncsLost.Load()},
		{"syncd_syncs_total", "", "", `outcome="unrecorded"`, m.SyncsUnrecorded.Load()},
		{"syncd_syncs_total", "", "", `outcome="resource"`, m.SyncsResource.Load()},
		{"syncd_syncs_total", "", "", `outcome="stale_fence"`, m.StaleFences.Load()},
		{"syncd_syncs_total", "", "", `outcome="handed_back"`, m.HandedBack.Load()},
		{"syncd_syncs_total", "", "", `outcome="target_unavailable"`, m.SyncsUnavailable.Load()},
		{"syncd_target_up", "0 while the target's breaker is open (as this process last saw it), else 1.", "gauge", "", m.TargetUp.Load()},
		{"syncd_target_transitions_total", "Breaker transitions this process made.", "counter", `to="open"`, m.TargetOpened.Load()},
		{"syncd_target_transitions_total", "", "", `to="closed"`, m.TargetClosed.Load()},
		{"syncd_target_probes_total", "Probe syncs of an open breaker this process was granted.", "counter", "", m.TargetProbes.Load()},
		{"syncd_target_waits_total", "Claim rounds held back by the target's rate limit, max_in_flight or breaker.", "counter", "", m.TargetWaits.Load()},
		{"syncd_redis_data_losses_total", "Times this process saw Redis lose the deployment's data and restored the item set.", "counter", "", m.DataLosses.Load()},
		{"syncd_reconciles_total", "Reconciles of the item set with its sources this process ran, by result.", "counter", `result="ok"`, m.ReconcileOK.Load()},
		{"syncd_reconciles_total", "", "", `result="guarded"`, m.ReconcileGuarded.Load()},
		{"syncd_reconciles_total", "", "", `result="failed"`, m.ReconcileFailed.Load()},
		{"syncd_reconcile_refusing", "1 while the last reconcile removed nothing: a source failed, was empty or would remove more than items.max_removal.", "gauge", "", m.ReconcileRefusing.Load()},
		{"syncd_target_permits_lost_total", "max_in_flight permits that expired while their syncs ran.", "counter", "", m.PermitsLost.Load()},
		{"syncd_quarantined_total", "Items quarantined after max_attempts or a permanent error.", "counter", "", m.Quarantined.Load()},
		{"syncd_items_damaged_total", "Items a claim quarantined because their state in Redis is damaged, by what.", "counter", `reason="fence"`, o.DamagedFences.Load()},
		{"syncd_items_damaged_total", "", "", `reason="id"`, o.DamagedIDs.Load()},
		{"syncd_lease_losses_total", "Leases lost, by reason.", "counter", `reason="taken"`, o.LostTaken.Load()},
		{"syncd_lease_losses_total", "", "", `reason="deleted"`, o.LostDeleted.Load()},
		{"syncd_lease_losses_total", "", "", `reason="expired"`, o.LostExpired.Load()},
		{"syncd_lease_losses_total", "", "", `reason="unreachable"`, o.LostUnreachable.Load()},
		{"syncd_heartbeats_total", "Heartbeat round trips.", "counter", "", o.Heartbeats.Load()},
		{"syncd_heartbeat_errors_total", "Heartbeat round trips that failed.", "counter", "", o.HeartbeatErrors.Load()},
		{"syncd_in_flight", "Syncs running now.", "gauge", "", m.InFlight.Load()},
		{"syncd_due_backlog", "Items due now, fleet-wide.", "gauge", "", m.DueBacklog.Load()},
		{"syncd_shards_damaged", "Shards skipped because a key of theirs is damaged (see /readyz).", "gauge", "", m.ShardsDamaged.Load()},
	}
	for _, x := range ms {
		if x.help != "" {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", x.name, x.help, x.name, x.kind)
		}
		if x.labels != "" {
			fmt.Fprintf(w, "%s{%s} %d\n", x.name, x.labels, x.v)
		} else {
			fmt.Fprintf(w, "%s %d\n", x.name, x.v)
		}
	}
	fmt.Fprintf(w, "# HELP syncd_oldest_due_seconds How long the oldest due item has waited past due, fleet-wide.\n# TYPE syncd_oldest_due_seconds gauge\nsyncd_oldest_due_seconds %g\n",
		float64(m.OldestDueMs.Load())/1000)
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintf(w, "# HELP syncd_sync_duration_seconds Time the sink took per sync.\n# TYPE syncd_sync_duration_seconds histogram\n")
	cum := int64(0)
	for i, b := range durationBuckets {
		cum += m.buckets[i]
		fmt.Fprintf(w, "syncd_sync_duration_seconds_bucket{le=\"%g\"} %d\n", b.Seconds(), cum)
	}
	cum += m.buckets[len(durationBuckets)]
	fmt.Fprintf(w, "syncd_sync_duration_seconds_bucket{le=\"+Inf\"} %d\n", cum)
	fmt.Fprintf(w, "syncd_sync_duration_seconds_sum %g\nsyncd_sync_duration_seconds_count %d\n", m.sum.Seconds(), m.count)
	return nil
}
