package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// APIGoal is the p99 the API's summary and first page of items must
// answer in at 1M items (issue 12).
const APIGoal = 50 * time.Millisecond

// APIResults are the read costs behind the /api/v1 routes at N items.
type APIResults struct {
	N, Shards, Calls int
	Ops              []APIOp
}

// APIOp is one read, called Calls times in a row.
type APIOp struct {
	Name          string
	P50, P99, Max time.Duration
	Items         int  // items on the page (last call)
	Partial       bool // the page came back partial (last call)
	Goal          bool // held to APIGoal
}

// RunAPI loads n items into a fresh key prefix, spread as a busy
// deployment's are (10% due over the last hour, 1% failing, 0.1%
// quarantined, the rest due over the next hour, 3 daemons in the
// registry), and times the store calls behind the API's routes: the
// summary (store.Counts and store.TargetState, what api.ReadSummary
// sends) and first pages of items (store.ListPage). The api package
// itself is internal to cmd/syncd; its handlers add a JSON encoding of
// at most 500 items to these calls.
func RunAPI(ctx context.Context, srv *Server, n, calls int, logf func(string, ...any)) (*APIResults, error) {
	srv.FlushAll(ctx)
	defer srv.FlushAll(ctx)
	st, _, err := openStore(ctx, srv.Addr(), "api", nil)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	start := time.Now()
	if err := loadAPISet(ctx, st, n); err != nil {
		return nil, err
	}
	logf("api: loaded %s items in %v", humanCount(n), time.Since(start).Round(time.Millisecond))
	for i := range 3 {
		d := store.DaemonInfo{ID: fmt.Sprintf("host%d:1", i), Host: fmt.Sprintf("host%d", i), PID: 1, Workers: 64}
		if err := st.WriteDaemon(ctx, d, time.Minute); err != nil {
			return nil, err
		}
	}
	res := &APIResults{N: n, Shards: st.Keys().Shards(), Calls: calls}
	page := func(q store.ListQuery) func() (int, bool, error) {
		return func() (int, bool, error) {
			p, err := st.ListPage(ctx, q)
			return len(p.Items), p.Partial, err
		}
	}
	ops := []struct {
		name string
		goal bool
		f    func() (int, bool, error)
	}{
		{"summary (Counts + TargetState)", true, func() (int, bool, error) {
			if _, err := st.Counts(ctx); err != nil {
				return 0, false, err
			}
			_, err := st.TargetState(ctx)
			return 0, false, err
		}},
		{"items, state=all, first page of 50", true, page(store.ListQuery{})},
		{"items, state=due, first page of 50", true, page(store.ListQuery{State: store.ItemDue})},
		{"items, state=all, first page of 500", false, page(store.ListQuery{Limit: 500})},
		{"items, state=backing_off, first page of 50", false, page(store.ListQuery{State: store.ItemBackingOff})},
		{"items, prefix=item-00999, first page of 50", false, page(store.ListQuery{Prefix: "item-00999"})},
		{"item detail (Item)", false, func() (int, bool, error) { _, err := st.Item(ctx, scaleID(n/2)); return 1, false, err }},
	}
	for _, op := range ops {
		r, err := timeAPIOp(op.name, calls, op.f)
		if err != nil {
			return nil, err
		}
		r.Goal = op.goal
		logf("api %s items: %-45s p50 %v p99 %v max %v (%d items, partial %v)", humanCount(n), op.name,
			r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(10*time.Microsecond), r.Items, r.Partial)
		res.Ops = append(res.Ops, r)
	}
	return res, nil
}

// timeAPIOp calls f calls times (after 5 warm-up calls) and summarises.
func timeAPIOp(name string, calls int, f func() (int, bool, error)) (APIOp, error) {
	r := APIOp{Name: name}
	for range 5 {
		if _, _, err := f(); err != nil {
			return r, fmt.Errorf("api %s: %w", name, err)
		}
	}
	lat := make([]time.Duration, calls)
	for i := range lat {
		t := time.Now()
		n, partial, err := f()
		lat[i] = time.Since(t)
		if err != nil {
			return r, fmt.Errorf("api %s: %w", name, err)
		}
		r.Items, r.Partial = n, partial
	}
	slices.Sort(lat)
	r.P50, r.P99, r.Max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	return r, nil
}

// loadAPISet writes n items straight into the shards' due, meta and err
// keys, in pipelines of 10,000 (store.Add would give them all one due
// time).
func loadAPISet(ctx context.Context, st *store.Store, n int) error {
	now, err := st.Now(ctx)
	if err != nil {
		return err
	}
	k := st.Keys()
	rng := rand.New(rand.NewPCG(1, 2))
	hour := float64(time.Hour.Milliseconds())
	for lo := 0; lo < n; lo += 10_000 {
		p := st.Client().Pipeline()
		for i := lo; i < min(lo+10_000, n); i++ {
			id := scaleID(i)
			sh := k.Shard(id)
			score := float64(now) + hour*rng.Float64()
			switch r := rng.IntN(1000); {
			case r == 0:
				score = math.Inf(1)
				p.HSet(ctx, k.Errors(sh), id, "quarantined: boom")
			case r < 10:
				p.HSet(ctx, k.Errors(sh), id, "status 500: boom")
			case r < 110:
				score = float64(now) - hour*rng.Float64()
			}
			p.ZAdd(ctx, k.Due(sh), redis.Z{Score: score, Member: id})
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("load %s..: %w", strconv.Itoa(lo), err)
		}
	}
	return nil
}
