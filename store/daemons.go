package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of the daemon registry: the in-flight IDs one entry lists, the
// daemons Daemons reads, and the bytes of one entry it accepts.
const (
	DaemonInFlightMax = 1000
	DaemonsMax        = 1000
	daemonEntryMax    = 1 << 20
)

// DaemonInfo is one daemon's entry in the registry (see WriteDaemon).
type DaemonInfo struct {
	ID      string `json:"id"` // "host:pid"
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Run     string `json:"run,omitempty"` // the run of the process, as in its owners
	Version string `json:"version"`
	Started int64  `json:"started_ms"` // Unix ms
	Workers int    `json:"workers"`
	// InFlight lists the items it syncs now, at most DaemonInFlightMax;
	// InFlightCount counts them all.
	InFlight      []string `json:"in_flight"`
	InFlightCount int      `json:"in_flight_count"`
	Draining      bool     `json:"draining"`
	// Heartbeat is when the entry was last written, ms on Redis's clock;
	// Daemons sets it.
	Heartbeat int64 `json:"-"`
	// Problem is set by Daemons for an entry it could not read.
	Problem string `json:"-"`
}

// WriteDaemon writes info into the registry, in one script call. The
// entry expires after three periods unless written again. IDs past
// DaemonInFlightMax are dropped from InFlight (InFlightCount keeps the
// count).
func (s *Store) WriteDaemon(ctx context.Context, info DaemonInfo, period time.Duration) error {
	if info.ID == "" {
		return errors.New("store: write daemon: empty id")
	}
	info.InFlightCount = max(info.InFlightCount, len(info.InFlight))
	if len(info.InFlight) > DaemonInFlightMax {
		info.InFlight = info.InFlight[:DaemonInFlightMax]
	}
	if info.InFlight == nil {
		info.InFlight = []string{}
	}
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("store: write daemon %q: %w", info.ID, err)
	}
	ttl := max(3*period, time.Second).Milliseconds()
	k := s.keys
	if _, err := s.runScript(ctx, s.rdb, scriptDaemonWrite, []string{k.Daemons(), k.Daemon(info.ID)}, info.ID, b, ttl); err != nil {
		return fmt.Errorf("store: write daemon %q: %w", info.ID, err)
	}
	return nil
}

// RemoveDaemon removes a daemon's entry, at a clean shutdown.
func (s *Store) RemoveDaemon(ctx context.Context, id string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.keys.Daemon(id))
		p.ZRem(ctx, s.keys.Daemons(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: remove daemon %q: %w", id, err)
	}
	return nil
}

// Daemons returns the live daemons (at most DaemonsMax, longest silent
// first) and Redis's clock, in two round trips; entries whose key
// expired are pruned from the registry in a third. An entry that cannot
// be read is returned with its ID and Problem.
func (s *Store) Daemons(ctx context.Context) ([]DaemonInfo, int64, error) {
	var now *redis.TimeCmd
	var ids *redis.ZSliceCmd
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		ids = p.ZRangeWithScores(ctx, s.keys.Daemons(), 0, DaemonsMax-1)
		return nil
	})
	if err := now.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: daemons: %w", err)
	}
	if err := ids.Err(); err != nil && !isDamageReply(err) {
		return nil, 0, fmt.Errorf("store: daemons: %w", err)
	}
	nowMs := now.Val().UnixMilli()
	z := ids.Val() // a registry of another type reads as empty
	if len(z) == 0 {
		return nil, nowMs, nil
	}
	// At most daemonEntryMax+1 bytes of each entry: a planted entry of
	// 200 MB, read whole every 2 s by each daemon and each API reader,
	// took a daemon to 852 MB and Redis to 3.7 GB of output buffers (an
	// attacker's trial). STRLEN says how long it is, and 0 that it is
	// gone (an empty entry is no entry either).
	lens := make([]*redis.IntCmd, len(z))
	gets := make([]*redis.StringCmd, len(z))
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range z {
			id, _ := m.Member.(string)
			lens[i] = p.StrLen(ctx, s.keys.Daemon(id))
			gets[i] = p.GetRange(ctx, s.keys.Daemon(id), 0, daemonEntryMax)
		}
		return nil
	})
	var out []DaemonInfo
	var gone []any
	for i, m := range z {
		id, _ := m.Member.(string)
		n, err := lens[i].Result()
		v := ""
		if err == nil {
			v, err = gets[i].Result()
		}
		switch {
		case err == nil && n == 0:
			gone = append(gone, id)
			continue
		case err != nil && !isDamageReply(err):
			return nil, nowMs, fmt.Errorf("store: daemons: %w", err)
		}
		d := decodeDaemon(id, v, n, err)
		d.Heartbeat = int64(m.Score)
		out = append(out, d)
	}
	if len(gone) > 0 {
		if err := s.rdb.ZRem(ctx, s.keys.Daemons(), gone...).Err(); err != nil {
			return nil, nowMs, fmt.Errorf("store: daemons: prune: %w", err)
		}
	}
	return out, nowMs, nil
}

// decodeDaemon reads one registry entry, v, the first bytes of n (its
// whole length); what it cannot read it says in Problem.
func decodeDaemon(id, v string, n int64, err error) DaemonInfo {
	d := DaemonInfo{ID: id}
	switch {
	case err != nil:
		d.Problem = "a key of another type"
	case n > daemonEntryMax:
		d.Problem = fmt.Sprintf("%d bytes, more than %d", n, daemonEntryMax)
	default:
		if err := json.Unmarshal([]byte(v), &d); err != nil {
			return DaemonInfo{ID: id, Problem: "not a daemon entry: " + err.Error()}
		}
		d.ID = id
		// A planted entry's counts would run into the fleet's sums (an
		// attacker's trial got "-9223372036854775804 workers"): one out
		// of any daemon's range is a problem, counted as nothing.
		if d.Workers < 0 || d.Workers > daemonCountMax || d.InFlightCount < 0 || d.InFlightCount > daemonCountMax {
			return DaemonInfo{ID: id, Problem: fmt.Sprintf("not a daemon entry: workers %d, in flight %d", d.Workers, d.InFlightCount)}
		}
		if len(d.InFlight) > DaemonInFlightMax {
			d.InFlight = d.InFlight[:DaemonInFlightMax]
		}
		d.InFlightCount = max(d.InFlightCount, len(d.InFlight))
	}
	return d
}

// daemonCountMax bounds a registry entry's workers and in-flight count:
// far past what a daemon runs (engine.WorkersMax is 10,000, with as many
// claimed ahead), so that a fleet's sums cannot overflow.
const daemonCountMax = 1 << 20
