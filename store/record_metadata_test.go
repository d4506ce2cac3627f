package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"
)

// A lock's metadata is a 12th field, written only when there is some:
// records without it are byte for byte what earlier builds wrote, and
// both decode.
func TestRecordMetadata(t *testing.T) {
	plain := testRecord()
	old := MarshalRecord(plain)
	if old[0] != 0x9b {
		t.Fatalf("a record without metadata starts %#x, want 0x9b (11 fields)", old[0])
	}
	with := *plain
	with.Metadata = "order 17 from checkout-3"
	b := MarshalRecord(&with)
	if b[0] != 0x9c || !bytes.Equal(b[1:len(old)], old[1:]) {
		t.Fatalf("record with metadata = % x, want 0x9c then the old fields", b)
	}
	got, err := UnmarshalRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, &with); diff != "" {
		t.Errorf("round trip (-got +want):\n%s", diff)
	}
	if got, err := UnmarshalRecord(old); err != nil || got.Metadata != "" {
		t.Errorf("old record = %+v, %v", got, err)
	}
	var v []any
	if err := msgpack.Unmarshal(b, &v); err != nil || len(v) != 12 || v[11] != with.Metadata {
		t.Errorf("as msgpack: %v, %v", v, err)
	}
	// The longest record stays under the decoder's limit.
	long := *plain
	long.Owner.Host, long.Owner.Run = strings.Repeat("h", 100), strings.Repeat("r", 100)
	long.Owner.PID, long.Owner.Worker = 1<<31, 1<<31
	long.Metadata = strings.Repeat("m", 1000)
	b = MarshalRecord(&long)
	if got, err := UnmarshalRecord(b); err != nil || len(got.Metadata) != MaxMetadataLen {
		t.Errorf("longest record (%d bytes) = %v; metadata truncated to %d?", len(b), err, MaxMetadataLen)
	}
}

func TestUnmarshalRecordRejectsBadMetadata(t *testing.T) {
	old := MarshalRecord(testRecord())
	twelve := append([]byte{0x9c}, old[1:]...)
	for name, b := range map[string][]byte{
		"missing":      twelve,
		"not a string": append(bytes.Clone(twelve), 0x01),
		"truncated":    append(bytes.Clone(twelve), 0xd9, 40, 'x'),
		"too long":     append(append(bytes.Clone(twelve), 0xd9, MaxMetadataLen+1), strings.Repeat("m", MaxMetadataLen+1)...),
	} {
		if _, err := UnmarshalRecord(b); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: err = %v, want ErrBadRecord", name, err)
		}
	}
}
