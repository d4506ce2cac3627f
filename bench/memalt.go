package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// MemAlt is the memory of one way to hold the per-item state hash.
type MemAlt struct {
	Name         string
	ValueExample string
	BytesPerItem float64
}

// RunMemAlternatives writes n items' state values, as the scripts write
// them after one sync, in four layouts, and measures used_memory for
// each: the layout now (one hash per shard, "fence:lastSyncMs:attempts"
// in decimal), the same values in base 36, and both split into small
// hashes of about 64 entries, which Redis keeps as listpacks (up to
// hash-max-listpack-entries: 128 upstream, 512 in Debian's build, which
// the benchmarks run). This is an experiment for the report, not the
// product's code path.
func RunMemAlternatives(ctx context.Context, srv *Server, n int) ([]MemAlt, error) {
	const shards = 16
	perShard := (n + shards - 1) / shards
	buckets := max(perShard/64, 1)
	now := time.Now()
	fence := now.UnixMicro()
	last := now.UnixMilli()
	dec := func(i int) string {
		return strconv.FormatInt(fence+int64(i), 10) + ":" + strconv.FormatInt(last+int64(i%1000), 10) + ":0"
	}
	// bin is the product's value (store/meta.go): fence in 7 bytes,
	// lastSync in 6, attempts in 1.
	bin := func(i int) string {
		var b [14]byte
		f, l := uint64(fence+int64(i)), uint64(last+int64(i%1000))
		for j := 6; j >= 0; j-- {
			b[j], f = byte(f), f>>8
		}
		for j := 12; j >= 7; j-- {
			b[j], l = byte(l), l>>8
		}
		return string(b[:])
	}
	flat := func(i int, id string) string { return fmt.Sprintf("ma:{s%d}:meta", i%shards) }
	bucketed := func(i int, id string) string {
		h := fnv.New32a()
		h.Write([]byte(id))
		return fmt.Sprintf("ma:{s%d}:meta:%d", i%shards, h.Sum32()%uint32(buckets))
	}
	layouts := []struct {
		name  string
		key   func(int, string) string
		value func(int) string
	}{
		{"before: one hash per shard, decimal value", flat, dec},
		{"now: one hash per shard, 14-byte binary value (store/meta.go)", flat, bin},
		{fmt.Sprintf("%d listpack buckets per shard (~64 entries each), 14-byte binary value", buckets), bucketed, bin},
	}
	rdb := srv.Client()
	var out []MemAlt
	for _, l := range layouts {
		if err := srv.FlushAll(ctx); err != nil {
			return nil, err
		}
		m0, err := srv.UsedMemory(ctx)
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i += 1000 {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := i; j < min(i+1000, n); j++ {
					id := scaleID(j)
					p.HSet(ctx, l.key(j, id), id, l.value(j))
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		m1, err := srv.UsedMemory(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, MemAlt{Name: l.name, ValueExample: l.value(0), BytesPerItem: float64(m1-m0) / float64(n)})
	}
	return out, srv.FlushAll(ctx)
}
