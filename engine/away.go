package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// awayProbe is how often a shard out of reach is read again, and
// awayProbeTimeout how long that read may take.
const (
	awayProbe        = time.Second
	awayProbeTimeout = 250 * time.Millisecond
)

// away tracks the shards whose due index could not be read while other
// shards could: in a Cluster, those of a master out of reach (crashed,
// paused, cut off) before a replica takes over, or for good when it has
// none and the Cluster serves the rest (cluster-require-full-coverage
// no). Reading them with the others would make every scheduling round
// wait out the read timeout, so the scheduler leaves them out of its
// reads and reads them apart every awayProbe, for awayProbeTimeout at
// most; meanwhile their items wait and every other shard goes on. A
// shard whose master came back, or whose replica took over, is read
// again within awayProbe. Logged when a shard goes out of reach and when
// it answers again.
type away struct {
	log zerolog.Logger

	mu     sync.Mutex
	shards map[int]*awayShard
}

type awayShard struct {
	err  error     // why its last read failed
	next time.Time // when to read it again
}

func newAway(log zerolog.Logger) *away {
	return &away{log: log, shards: map[int]*awayShard{}}
}

// mark records that shard did not answer, as err says.
func (a *away) mark(shard int, err error) {
	a.mu.Lock()
	_, known := a.shards[shard]
	a.shards[shard] = &awayShard{err: err, next: time.Now().Add(awayProbe)}
	a.mu.Unlock()
	if !known {
		a.log.Warn().Err(err).Int("shard", shard).Int64("retry_every_ms", awayProbe.Milliseconds()).
			Msg("shard out of reach (its Redis did not answer while others did): its items wait, every other shard goes on")
	}
}

// clear records that shard answered; logged once if it was out of reach.
func (a *away) clear(shard int) {
	a.mu.Lock()
	_, known := a.shards[shard]
	delete(a.shards, shard)
	a.mu.Unlock()
	if known {
		a.log.Info().Int("shard", shard).Msg("shard answers again")
	}
}

// due returns, in order, the shards out of reach, and of those the ones
// due to be read again now, whose next read it moves awayProbe on (so
// only one loop reads them).
func (a *away) due() (all, probe []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.shards) == 0 {
		return nil, nil
	}
	now := time.Now()
	for sh, as := range a.shards {
		all = append(all, sh)
		if !now.Before(as.next) {
			probe = append(probe, sh)
			as.next = now.Add(awayProbe)
		}
	}
	sort.Ints(all)
	sort.Ints(probe)
	return all, probe
}

// shardList returns the shards out of reach, in order.
func (a *away) shardList() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.shards))
}

// list returns, by shard, an error for each shard out of reach, naming
// it and why.
func (a *away) list() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	shards := slices.Sorted(maps.Keys(a.shards))
	out := make([]error, len(shards))
	for i, sh := range shards {
		out[i] = fmt.Errorf("shard %d out of reach (its items wait; read again every %v): %w", sh, awayProbe, a.shards[sh].err)
	}
	return out
}
