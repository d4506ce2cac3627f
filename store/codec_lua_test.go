package store_test

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// codecProbe runs the prelude's byte codecs on ARGV: op, then its
// arguments. Numbers come back as decimal strings, exactly.
var codecProbe = func() string {
	var src strings.Builder
	src.WriteString(store.PreludeHelpers("be4", "be8", "unbe", "times", "stamp", "fence_of", "attempt_of", "num", "meta_value", "enc"))
	src.WriteString(`
local op, a, b, c = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if op == 'be4' then return be4(tonumber(a)) end
if op == 'be8' then return be8(tonumber(a)) end
if op == 'meta' then return meta_value(tonumber(a), tonumber(b), tonumber(c)) end
if op == 'fence' then return num(fence_of(a)) end
if op == 'attempt' then return num(attempt_of(a)) end
if op == 'enc' then return enc(a) end
if op == 'stamp' then return stamp(a, be8(tonumber(b)), times(tonumber(c)), 7) end
return redis.error_reply('unknown op ' .. op)
`)
	return src.String()
}()

// TestLuaCodecs: the prelude's byte codecs, run by Redis's Lua and by the
// embedded store's, write and read exactly what the Go side does: be4 and
// be8 (big-endian), meta_value (encodeMeta), fence_of and attempt_of (the
// record layout), stamp (MarshalRecord), enc (EncodeID). They are written
// for speed (one string.char or string.byte call each), so the edges are
// checked here: zero, byte and word boundaries, 2^53 - 1.
func TestLuaCodecs(t *testing.T) {
	m := miniredis.RunT(t)
	srv := redistest.Start(t, nil)
	for name, addr := range map[string]string{"embedded": m.Addr(), "redis": srv.Addr()} {
		t.Run(name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			run := func(args ...any) string {
				t.Helper()
				v, err := rdb.Eval(t.Context(), codecProbe, nil, args...).Text()
				if err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				return v
			}
			for _, n := range []uint64{0, 1, 255, 256, 65535, 65536, 1<<24 - 1, 1 << 24, 1<<32 - 1} {
				want := binary.BigEndian.AppendUint32(nil, uint32(n))
				if got := run("be4", n); got != string(want) {
					t.Errorf("be4(%d) = %x, want %x", n, got, want)
				}
			}
			for _, n := range []uint64{0, 1, 255, 1<<32 - 1, 1 << 32, 1<<48 + 12345, 1795725642921531, 1<<53 - 1} {
				want := binary.BigEndian.AppendUint64(nil, n)
				if got := run("be8", n); got != string(want) {
					t.Errorf("be8(%d) = %x, want %x", n, got, want)
				}
			}
			for _, c := range []struct {
				fence    uint64
				last     int64
				attempts int
			}{
				{0, 0, 0}, {1, 2, 3}, {1795326333310972, 1795326333348, 255}, {1<<53 - 1, 1<<48 - 1, 256}, {1 << 32, 1 << 40, 1<<31 - 1},
			} {
				want := store.EncodeMeta(c.fence, c.last, c.attempts)
				if got := run("meta", c.fence, c.last, c.attempts); got != string(want) {
					t.Errorf("meta_value(%d, %d, %d) = %x, want %x", c.fence, c.last, c.attempts, got, want)
				}
			}
			rec := &store.Record{Version: store.RecordVersion, Token: store.NewToken(), State: store.StateSyncing, Owner: store.Owner{Host: "h", PID: 1, Run: "r", Worker: 2}}
			for _, c := range []struct {
				fence   uint64
				ms      int64
				attempt uint32
			}{{0, 0, 0}, {1795725642921531, 1795725642921, 7}, {1<<53 - 1, 1<<48 - 1, 1<<32 - 1}} {
				rec.Fence, rec.Attempt = c.fence, c.attempt
				b := store.MarshalRecord(rec)
				if got := run("fence", b); got != strconv.FormatUint(c.fence, 10) {
					t.Errorf("fence_of(record of fence %d) = %s", c.fence, got)
				}
				if got := run("attempt", b); got != strconv.FormatUint(uint64(c.attempt), 10) {
					t.Errorf("attempt_of(record of attempt %d) = %s", c.attempt, got)
				}
				rec.ClaimedAt, rec.HeartbeatAt, rec.Attempt = time.UnixMilli(c.ms), time.UnixMilli(c.ms), 7
				if got, want := run("stamp", store.MarshalRecord(&store.Record{Version: store.RecordVersion, Token: rec.Token, State: rec.State, Owner: rec.Owner}), c.fence, c.ms), store.MarshalRecord(rec); got != string(want) {
					t.Errorf("stamp(fence %d, %d ms) = %x, want %x", c.fence, c.ms, got, want)
				}
			}
			// A value too short for its fence or attempt reads the bytes
			// it has, big-endian (as a loop over them would).
			short := strings.Repeat("\x00", 21) + "\x01\x02\x03"
			if got := run("fence", short); got != strconv.Itoa(0x010203) {
				t.Errorf("fence_of(24 bytes) = %s, want %d", got, 0x010203)
			}
			if got := run("attempt", short[:10]); got != "0" {
				t.Errorf("attempt_of(10 bytes) = %s, want 0", got)
			}
			for _, id := range []string{"item-0000042", "a_b.c-D9", "", "with space", "a:b{c}", "50%", "ünïcode", "tab\there", "x*y?z[1]\\"} {
				if got := run("enc", id); got != store.EncodeID(id) {
					t.Errorf("enc(%q) = %q, want %q", id, got, store.EncodeID(id))
				}
			}
		})
	}
}
