package store

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"
)

func testRecord() *Record {
	return &Record{
		Version:     RecordVersion,
		Token:       NewToken(),
		Fence:       1795317742562106,
		ClaimedAt:   time.UnixMilli(1795317742562),
		HeartbeatAt: time.UnixMilli(1795317752562),
		State:       StateSyncing,
		Attempt:     3,
		Owner:       Owner{Host: "worker-7.example.internal", PID: 41234, Run: "ABCDEFGH", Worker: 12},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	want := testRecord()
	b := MarshalRecord(want)
	if len(b) > 100 {
		t.Errorf("record is %d bytes, want under 100", len(b))
	}
	got, err := UnmarshalRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("round trip (-got +want):\n%s", diff)
	}
	tok, ok := RecordToken(b)
	if !ok || tok != want.Token {
		t.Errorf("RecordToken = %v, %v", tok, ok)
	}
}

// The record is plain msgpack: any msgpack library reads it.
func TestRecordIsMsgpack(t *testing.T) {
	r := testRecord()
	var v []any
	if err := msgpack.Unmarshal(MarshalRecord(r), &v); err != nil {
		t.Fatal(err)
	}
	if len(v) != recordFields {
		t.Fatalf("%d fields, want %d", len(v), recordFields)
	}
	if got := v[2]; got != r.Fence {
		t.Errorf("fence field = %v (%T), want %d", got, got, r.Fence)
	}
	if got := v[7]; got != r.Owner.Host {
		t.Errorf("host field = %v", got)
	}
}

// The offsets the scripts patch must be where the Go codec puts them.
func TestRecordOffsets(t *testing.T) {
	r := testRecord()
	r.Fence, r.Attempt = 0x0102030405060708, 0x0a0b0c0d
	r.HeartbeatAt = time.UnixMilli(0x0000112233445566)
	r.State = StateClaimed
	c := MarshalRecord(r)
	for _, f := range []struct {
		name string
		at   int
		want []byte
	}{
		{"fence", offFence, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"heartbeat", offHeartbeat, []byte{0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66}},
		{"state", offState, []byte{1}},
		{"attempt", offAttempt, []byte{0x0a, 0x0b, 0x0c, 0x0d}},
	} {
		if got := c[f.at : f.at+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at %d = % x, want % x", f.name, f.at, got, f.want)
		}
	}
	if !bytes.Equal(c[offToken:offToken+16], r.Token[:]) {
		t.Errorf("token not at %d", offToken)
	}
}

func TestUnmarshalRecordRejects(t *testing.T) {
	good := MarshalRecord(testRecord())
	tests := map[string][]byte{
		"empty":           nil,
		"short":           good[:20],
		"oversized":       append(bytes.Clone(good), make([]byte, MaxRecordSize)...),
		"not an array":    append([]byte{0x80}, good[1:]...),
		"version 0":       append([]byte{good[0], 0}, good[2:]...),
		"truncated owner": good[:len(good)-3],
		"huge str length": append(bytes.Clone(good[:headerLen]), 0xd9, 0xff, 'x'),
		"hostile str32":   append(bytes.Clone(good[:headerLen]), 0xdb, 0xff, 0xff, 0xff, 0xff),
		"plain text":      []byte(strings.Repeat("not a record ", 10)),
	}
	for name, b := range tests {
		if _, err := UnmarshalRecord(b); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: err = %v, want ErrBadRecord", name, err)
		}
	}
}

// FuzzUnmarshalRecord: hostile bytes never panic, never allocate in
// proportion to a length prefix, and whatever decodes re-encodes to a
// record that decodes the same.
func FuzzUnmarshalRecord(f *testing.F) {
	f.Add(MarshalRecord(testRecord()))
	f.Add([]byte{0x9b, 0x01, 0xc4, 0x10})
	f.Add([]byte("\x9b\x01\xdd\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// A hostile length prefix must not make the decoder allocate in
		// proportion to it (msgpack v5.4.1 allocated 1 GiB for 11 bytes).
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := UnmarshalRecord(b)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(b), n)
		}
		if err != nil {
			return
		}
		again, err := UnmarshalRecord(MarshalRecord(r))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if diff := cmp.Diff(again, r); diff != "" {
			t.Fatalf("re-encode changed the record:\n%s", diff)
		}
	})
}
