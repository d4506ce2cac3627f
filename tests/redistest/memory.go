package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// fillScript writes ARGV[2] 1 KiB values under keys "redistest:junk:<ARGV[1]>:<i>".
// A script's writes are checked against maxmemory only when it starts, so
// a call writes its whole batch and the next one is refused with OOM.
const fillScript = `for i = 1, tonumber(ARGV[2]) do
  redis.call('SET', 'redistest:junk:' .. ARGV[1] .. ':' .. i, string.rep('x', 1024))
end
return 1`

// FillMemory puts the server out of memory as an operator's trial did:
// maxmemory a little above what it uses now, maxmemory-policy
// noeviction, then 1 KiB values until Redis refuses writes with OOM. It
// returns a function that frees the memory again (it deletes the values
// and lifts maxmemory).
func (s *Server) FillMemory(t testing.TB) (free func()) {
	t.Helper()
	ctx := context.Background()
	c := s.Client(t)
	used, err := usedMemory(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for batch := 0; ; batch++ {
		err := c.Eval(ctx, fillScript, nil, batch, 256).Err()
		if redis.IsOOMError(err) {
			break
		}
		if err != nil {
			t.Fatalf("redistest: fill %s: %v", s.Addr(), err)
		}
		if batch == 1000 {
			t.Fatalf("redistest: %s took 256 MiB under maxmemory %d and refused nothing", s.Addr(), used+2<<20)
		}
	}
	return func() {
		t.Helper()
		if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		var keys []string
		iter := c.Scan(ctx, 0, "redistest:junk:*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
				t.Fatal(err)
			}
			keys = keys[n:]
		}
	}
}

// usedMemory reads used_memory from the server's INFO memory.
func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	text, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}
