package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Unknown returns the ids, of those given, that are not in the item set,
// in the order given and each once. It takes any id up to MaxRemoveIDLen
// bytes, as Remove does, and one round trip per 1000 ids a shard. It
// changes nothing: an admin command calls it to name the ids that
// Requeue or Remove will find missing.
func (s *Store) Unknown(ctx context.Context, ids ...string) ([]string, error) {
	g, err := s.byShard(ids, removable)
	if err != nil {
		return nil, err
	}
	var cmds []*redis.Cmd
	var asked [][]any
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh, args := range g {
			for len(args) > 0 {
				chunk := args[:min(len(args), 1000)]
				args = args[len(chunk):]
				cmds = append(cmds, p.Do(ctx, append([]any{"ZMSCORE", s.keys.Due(sh)}, chunk...)...))
				asked = append(asked, chunk)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: unknown: %w", err)
	}
	known := map[string]bool{}
	for i, cmd := range cmds {
		// The reply is input too: one entry per id asked, nil for a
		// missing one.
		v, err := cmd.Slice()
		if err != nil || len(v) != len(asked[i]) {
			return nil, fmt.Errorf("store: unknown: ZMSCORE of %d ids: %d entries, %v", len(asked[i]), len(v), err)
		}
		for j, score := range v {
			if score != nil {
				known[asked[i][j].(string)] = true
			}
		}
	}
	var unknown []string
	for _, id := range ids {
		if !known[id] {
			unknown = append(unknown, id)
			known[id] = true // each once
		}
	}
	return unknown, nil
}
