package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	d := Deployment{ID: text, New: created == 1}
	if id, ms, ok := strings.Cut(text, " "); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			d.ID, d.Created = id, time.UnixMilli(n)
			d.Age = max(time.Duration(nowms-n)*time.Millisecond, 0)
		}
	}
	return d, nil
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
	At       time.Time `json:"at"`       // when a process found the marker gone
	Count    int64     `json:"count"`    // how many times, since the record itself was last lost
	Restored int       `json:"restored"` // items added back from the sources
	Lost     int       `json:"lost"`     // items gone that no source holds (added by hand), at most
	By       string    `json:"by"`       // the process that wrote this
}

// RecordDataLoss records a data loss for status. count says whether to
// count it: the process that wrote the new marker does, and it alone
// writes At and By, so that both name the first process to find the loss
// (At and By came from different processes in an operator's check);
// every process writes what it restored and found lost.
func (s *Store) RecordDataLoss(ctx context.Context, l DataLoss, count bool) error {
	k := s.keys.DataLoss()
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k, "restored", l.Restored, "lost", l.Lost)
		if count {
			p.HSet(ctx, k, "at", l.At.UnixMilli(), "by", l.By)
			p.HIncrBy(ctx, k, "count", 1)
		}
		return nil
	})
	if err != nil && !isDamageReply(err) {
		return fmt.Errorf("store: record data loss: %w", err)
	}
	return nil
}

// LastDataLoss reads the record RecordDataLoss writes; nil when there is
// none (or it is not a hash).
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
	return &DataLoss{At: time.UnixMilli(num("at")), Count: num("count"), Restored: int(num("restored")),
		Lost: int(num("lost")), By: m["by"]}, nil
}
