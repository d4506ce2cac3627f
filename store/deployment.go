package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Deployment is the marker a deployment is known by in Redis. It is
// written when the deployment is first created, and again by whoever
// finds it missing: a Redis that lost its data (a restart without
// persistence, a FLUSHALL) loses it with everything else, and the marker
// written next has another ID. A process that remembers the ID it saw
// knows the data it relied on is gone.
type Deployment struct {
	ID      string
	Created time.Time // Redis's clock
	// New: this call wrote the marker.
	New bool
	// Age is how old the marker was when this call read it, by Redis's
	// clock (0 when New; unknown, and 0, for a marker made by hand).
	Age time.Duration
}

// Deployment reads the deployment's marker, writing a new one when it is
// missing, in one script call. A marker made by hand that does not
// parse reads as an ID of its own text.
func (s *Store) Deployment(ctx context.Context) (Deployment, error) {
	var b [8]byte
	rand.Read(b[:])
	v, err := s.runScript(ctx, s.rdb, scriptDeployment, []string{s.keys.Deployment()}, hex.EncodeToString(b[:]))
	if err != nil {
		return Deployment{}, fmt.Errorf("store: deployment marker: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return Deployment{}, fmt.Errorf("store: unexpected deployment reply %v", v)
	}
	text, _ := arr[0].(string)
	created, _ := arr[1].(int64)
	nowms, _ := arr[2].(int64)
	d := parseDeployment(text, nowms)
	d.New = created == 1
	return d, nil
}

// readDeployment reads the deployment's marker without writing one
// (Config.NoCreate); ok is false when it is missing.
func (s *Store) readDeployment(ctx context.Context) (d Deployment, ok bool, err error) {
	v, err := s.runScript(ctx, s.rdb, scriptDeploymentRead, []string{s.keys.Deployment()})
	if err != nil {
		return Deployment{}, false, fmt.Errorf("store: deployment marker: %w", err)
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return Deployment{}, false, fmt.Errorf("store: unexpected deployment reply %v", v)
	}
	text, ok := arr[0].(string)
	nowms, _ := arr[1].(int64)
	if !ok {
		return Deployment{}, false, nil
	}
	return parseDeployment(text, nowms), true, nil
}

// parseDeployment reads a marker's text, "<id> <created ms>", as Redis's
// clock read nowms.
func parseDeployment(text string, nowms int64) Deployment {
	d := Deployment{ID: text}
	if id, ms, ok := strings.Cut(text, " "); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			d.ID, d.Created = id, time.UnixMilli(n)
			d.Age = max(time.Duration(nowms-n)*time.Millisecond, 0)
		}
	}
	return d
}

// Deployed reports whether Redis held the deployment after Open (see
// ReadDeployed): always, unless Config.NoCreate, with which Open creates
// nothing.
func (s *Store) Deployed() bool { return s.deployed }

// ReadDeployed reports whether Redis holds the deployment now, writing
// nothing: its marker, or its shard count and items (a deployment from
// before the marker, or one that lost part of its data). A shard count
// alone is none: there is nothing of it to show, where a read-only
// command took it for one (syncd status printed an empty deployment and
// exited 0). Like Open, it refuses a shard count other than the
// configured one (ErrShardsMismatch).
func (s *Store) ReadDeployed(ctx context.Context) (bool, error) {
	deployed, _, _, err := s.readDeployed(ctx)
	return deployed, err
}

// readDeployed is ReadDeployed, and the marker, if ok.
func (s *Store) readDeployed(ctx context.Context) (deployed bool, d Deployment, ok bool, err error) {
	v, err := s.shardCount(ctx)
	hasShards := err == nil
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return false, d, false, err
	case v != s.keys.Shards():
		return false, d, false, fmt.Errorf("%w: configured %d, deployment %q has %d", ErrShardsMismatch, s.keys.Shards(), s.keys.Prefix(), v)
	}
	if d, ok, err = s.readDeployment(ctx); err != nil || ok || !hasShards {
		return ok, d, ok, err
	}
	deployed, err = s.hasItems(ctx)
	return deployed, d, false, err
}

// hasItems reports whether any shard's item set holds an item: one
// pipeline of ZCARD (in the least-privilege ACL, where EXISTS is not).
// A damaged item set (WRONGTYPE) counts as one: there is something
// there, which status shows as damage.
func (s *Store) hasItems(ctx context.Context) (bool, error) {
	cmds := make([]*redis.IntCmd, s.keys.Shards())
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh := range cmds {
			cmds[sh] = p.ZCard(ctx, s.keys.Due(sh))
		}
		return nil
	})
	for _, c := range cmds {
		if c.Val() > 0 || c.Err() != nil && !IsUnavailable(c.Err()) && !redis.IsPermissionError(c.Err()) {
			return true, nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("store: count items: %w", err)
	}
	return false, nil
}

// Fresh reports whether Open created the deployment: Redis held no data
// of it (neither its shard count nor its marker).
func (s *Store) Fresh() bool { return s.fresh }

// DeploymentAge is how old the deployment was when Open read its marker,
// by Redis's clock: 0 when Open created it, and the largest Duration when
// Open found the shard count without the marker (a deployment from
// before the marker, or one that lost part of its data), which is not
// new. A daemon that joins a fleet in its first ttl uses it to tell the
// new deployment's wait from a data loss.
func (s *Store) DeploymentAge() time.Duration { return s.deployAge }

// DataLoss is what the deployment remembers of the last time Redis lost
// its data, written by the processes that restored the item set.
type DataLoss struct {
	// At is when the loss was found: when the marker after it was written,
	// by Redis's clock. Zero when unknown (a record from before Marker, or
	// one whose at was lost).
	At       time.Time `json:"at,omitzero"`
	Count    int64     `json:"count"`    // how many times, since the record itself was last lost
	Restored int       `json:"restored"` // items added back from the sources
	Lost     int       `json:"lost"`     // items gone that no source holds (added by hand), at most
	By       string    `json:"by"`       // the process that first recorded this loss
	// Marker is the ID of the deployment marker written after the loss
	// (Deployment.ID): a loss is recorded and counted once per marker.
	Marker string `json:"marker,omitempty"`
}

// RecordDataLoss records for status the loss after which l.Marker was
// written. Every call writes what it restored and found lost; the first
// call for a marker also writes At and By and counts the loss, in one
// script, and reports counted. Which process wrote the marker does not
// matter: an admin command that writes (items add) may have, after a
// FLUSHALL, and the loss went unrecorded when only the marker's writer
// recorded it (status read 1970 for its time).
func (s *Store) RecordDataLoss(ctx context.Context, l DataLoss) (counted bool, err error) {
	n, err := s.runScript(ctx, s.rdb, scriptDataLoss, []string{s.keys.DataLoss()},
		l.Marker, l.At.UnixMilli(), l.By, l.Restored, l.Lost)
	if err != nil {
		return false, fmt.Errorf("store: record data loss: %w", err)
	}
	return n == int64(1), nil
}

// LastDataLoss reads the record RecordDataLoss writes; nil when there is
// none (or it is not a hash). At is zero when the record has no time.
func (s *Store) LastDataLoss(ctx context.Context) (*DataLoss, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.DataLoss()).Result()
	switch {
	case isDamageReply(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("store: read data loss: %w", err)
	case len(m) == 0:
		return nil, nil
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	l := &DataLoss{Count: num("count"), Restored: int(num("restored")), Lost: int(num("lost")), By: m["by"], Marker: m["marker"]}
	if at := num("at"); at > 0 {
		l.At = time.UnixMilli(at)
	}
	return l, nil
}
