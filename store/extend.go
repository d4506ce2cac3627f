package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ExtendCode is the outcome of extending one record.
type ExtendCode int8

// Extend outcomes.
const (
	ExtendOther   ExtendCode = -1 // another owner's record is there
	ExtendMissing ExtendCode = 0  // no record: expired, released or lost
	ExtendOK      ExtendCode = 1
)

// ExtendRequest names one record to extend.
type ExtendRequest struct {
	Key   string // Keys.Record or Keys.Lock
	Token Token
	// Due and ID, for an item lease (Key a Keys.Record): the item's
	// shard's Keys.Due and the item. When the record is extended, the
	// item's due score moves to the new lease end, as a claim set it,
	// never back and only if the item is still there: else an item in
	// flight longer than one ttl reads as due. Empty for a standalone
	// lock, which has no due entry.
	Due string
	ID  string
}

// ExtendResult is the outcome for one request.
type ExtendResult struct {
	Code  ExtendCode
	Fence uint64
}

// Extend compares the token of each record and, when it matches, sets its
// heartbeat time and expiry (and state, unless 0), and moves the due
// score of an item lease (ExtendRequest.Due) to the new expiry. Requests
// are grouped by hash slot and due key, one script call per group, all
// pipelined in one round trip.
func (s *Store) Extend(ctx context.Context, ttl time.Duration, state State, reqs []ExtendRequest) ([]ExtendResult, error) {
	groups := map[string]*extendGroup{}
	var order []string
	for i, r := range reqs {
		tag := hashTag(r.Key)
		if r.Due != "" && hashTag(r.Due) != tag {
			return nil, fmt.Errorf("store: extend %q: due key %q is in another slot", r.Key, r.Due)
		}
		group := tag + "\x00" + r.Due
		g := groups[group]
		if g == nil {
			g = &extendGroup{due: r.Due, args: []any{ttl.Milliseconds(), int(state)}}
			groups[group] = g
			order = append(order, group)
		}
		g.keys = append(g.keys, r.Key)
		if r.Due != "" {
			g.args = append(g.args, string(r.Token[:])+r.ID) // extend.lua: the ID follows the token
		} else {
			g.args = append(g.args, string(r.Token[:]))
		}
		g.idx = append(g.idx, i)
	}
	for _, g := range groups {
		if g.due != "" {
			g.keys = append(g.keys, g.due) // KEYS[n+1]
		}
	}
	out := make([]ExtendResult, len(reqs))
	replies := make([]any, len(order))
	var err error
	if len(order) == 1 {
		// One group (one lock, or one shard's leases): one script call,
		// through the auto-pipeliner when it is on.
		g := groups[order[0]]
		replies[0], err = s.runHot(ctx, scriptExtend, g.keys, g.args...)
	} else {
		err = s.extendPipelined(ctx, order, groups, replies)
	}
	if err != nil {
		return nil, fmt.Errorf("store: extend: %w", err)
	}
	for i, tag := range order {
		g := groups[tag]
		v, err := ints(replies[i], 2*len(g.idx))
		if err != nil {
			return nil, err
		}
		for j, at := range g.idx {
			out[at] = ExtendResult{Code: ExtendCode(v[2*j]), Fence: uint64(v[2*j+1])}
		}
	}
	return out, nil
}

// extendGroup is the requests of one hash slot and due key: one
// extend.lua call.
type extendGroup struct {
	due  string // the due key of item leases, "" for locks
	keys []string
	args []any
	idx  []int // into the requests
}

// extendPipelined runs one extend.lua call per group, pipelined in one
// round trip on the client, and puts each reply in replies.
func (s *Store) extendPipelined(ctx context.Context, order []string, groups map[string]*extendGroup, replies []any) error {
	run := func(p redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, len(order))
		for i, tag := range order {
			g := groups[tag]
			cmds[i] = scriptExtend.EvalSha(ctx, p, g.keys, g.args...)
		}
		return cmds
	}
	var cmds []*redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { cmds = run(p); return nil })
	if isNoScript(err) {
		if err := loadScripts(ctx, s.rdb); err != nil {
			return err
		}
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { cmds = run(p); return nil })
	}
	if err != nil {
		return err
	}
	for i, c := range cmds {
		replies[i] = c.Val()
	}
	return nil
}

// hashTag returns the part of a key that Redis Cluster hashes.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
