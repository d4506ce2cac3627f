package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
)

// Unknown names the ids not in the item set, in the order given, each
// once, over every shard; ids planted under a score of 0 or an invalid
// id count as known, as Remove finds them.
func TestUnknown(t *testing.T) {
	backends(t, func(t *testing.T, open func(store.Config) *store.Store) {
		s := open(store.Config{Shards: 4})
		ctx := context.Background()
		if _, err := s.Add(ctx, "a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		planted := "\x1b[31mred"
		s.Client().ZAdd(ctx, s.Keys().Due(s.Keys().Shard(planted)), redis.Z{Score: 0, Member: planted})
		got, err := s.Unknown(ctx, "x", "a", "y", planted, "x", "c", "", "z")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got, []string{"x", "y", "", "z"}); diff != "" {
			t.Errorf("Unknown (-got +want):\n%s", diff)
		}
		if got, err := s.Unknown(ctx, "a", "b"); err != nil || got != nil {
			t.Errorf("Unknown of known ids = %q, %v; want none", got, err)
		}
		many := make([]string, 2500)
		for i := range many {
			many[i] = fmt.Sprintf("new-%d", i)
		}
		if got, err := s.Unknown(ctx, append(many, "a")...); err != nil || !cmp.Equal(got, many) {
			t.Errorf("Unknown of %d new ids and a: %d ids, %v; want the %d new ones", len(many), len(got), err, len(many))
		}
		if _, err := s.Unknown(ctx, strings.Repeat("z", store.MaxRemoveIDLen+1)); err == nil {
			t.Error("Unknown of an id over MaxRemoveIDLen: no error")
		}
		// A damaged due index is an error, not an unknown id.
		sh := s.Keys().Shard("a")
		s.Client().Set(ctx, s.Keys().Due(sh), "garbage", 0)
		if got, err := s.Unknown(ctx, "x", "a"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("Unknown over a damaged shard = %q, %v; want WRONGTYPE", got, err)
		}
	})
}
