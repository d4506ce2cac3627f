package store

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCursorRoundTrip(t *testing.T) {
	pos := []shardPos{{}, {done: true}, {started: true, score: 1.5e12, skip: 3}, {started: true, score: math.Inf(-1), skip: 1},
		{started: true, score: math.Inf(1), skip: 1 << 20}}
	got, err := decodeCursor(encodeCursor(pos), len(pos))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, pos, cmp.AllowUnexported(shardPos{})); diff != "" {
		t.Errorf("(-got +want):\n%s", diff)
	}
	if _, err := decodeCursor(encodeCursor(pos), 4); !errors.Is(err, ErrBadCursor) {
		t.Errorf("another shard count: %v", err)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add("", 4)
	f.Add(encodeCursor([]shardPos{{}, {done: true}, {started: true, score: 12, skip: 2}}), 3)
	f.Add("AQQAAAAA", 4)
	f.Add("AQEB_____________wE", 1)
	f.Fuzz(func(t *testing.T, s string, shards int) {
		if shards < 1 || shards > ShardsMax {
			return
		}
		pos, err := decodeCursor(s, shards)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Errorf("error %v does not wrap ErrBadCursor", err)
			}
			return
		}
		if len(pos) != shards {
			t.Fatalf("%d positions for %d shards", len(pos), shards)
		}
		again, err := decodeCursor(encodeCursor(pos), shards)
		if err != nil || !cmp.Equal(again, pos, cmp.AllowUnexported(shardPos{})) {
			t.Errorf("round trip: %v, %v", again, err)
		}
	})
}
