package store

import (
	"errors"
	"hash/fnv"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	tests := []struct {
		id   string
		want string // substring of the error, "" for valid
	}{
		{"customer-42", ""},
		{"a{b}c:d*e", ""},
		{"日本語", ""},
		{strings.Repeat("x", MaxIDLen), ""},
		{"", "empty"},
		{strings.Repeat("x", MaxIDLen+1), "513 bytes long"},
		{"a\nb", "control character U+000A"},
		{"nul\x00", "control character U+0000"},
		{"del\x7f", "control character U+007F"},
		{"c1\u0085", "control character U+0085"},
		{"\ufeffcustomer-1", "invisible format character U+FEFF"},
		{"a\u202eb", "invisible format character U+202E"},
		{"bad\xff", "not valid UTF-8"},
	}
	for _, tt := range tests {
		err := ValidateID(tt.id)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidateID(%q) = %v, want nil", tt.id, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidID) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalidID containing %q", tt.id, err, tt.want)
		}
	}
	long := strings.Repeat("y", 1<<20)
	if err := ValidateID(long); err == nil || len(err.Error()) > 200 {
		t.Errorf("1 MB id: error %d bytes long, want a short error", len(err.Error()))
	}
}

func TestEncodeID(t *testing.T) {
	tests := []struct{ id, want string }{
		{"plain-id_1.2", "plain-id_1.2"},
		{"{s1}", "%7Bs1%7D"},
		{"a:b", "a%3Ab"},
		{"100%", "100%25"},
		{"x*?[]\\ y", "x%2A%3F%5B%5D%5C%20y"},
	}
	for _, tt := range tests {
		if got := EncodeID(tt.id); got != tt.want {
			t.Errorf("EncodeID(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestKeysShareSlotPerShard(t *testing.T) {
	k := NewKeys("syncd", 16)
	for _, id := range []string{"a", "{s3}", "x}{y", "rec:evil"} {
		sh := k.Shard(id)
		tag := hashTag(k.Due(sh))
		for _, key := range []string{k.Meta(sh), k.Errors(sh), k.Epoch(sh), k.Triggers(sh), k.Again(sh), k.Record(sh, id)} {
			if got := hashTag(key); got != tag {
				t.Errorf("id %q: key %q hashes on %q, want %q", id, key, got, tag)
			}
		}
	}
	if got, want := hashTag(k.Lock("a{b}")), hashTag(k.LockFence("a{b}")); got != want {
		t.Errorf("lock keys hash on %q and %q", got, want)
	}
}

// FuzzEncodeID: the encoding is injective, never yields a brace or a
// colon, and the record key of one item is never the key of another.
func FuzzEncodeID(f *testing.F) {
	for _, s := range []string{"a", "{", "}", ":", "%7B", "%", "a:b", "x{y}z", "日本", "*"} {
		f.Add(s, s+"x")
	}
	k := NewKeys("p", 8)
	f.Fuzz(func(t *testing.T, a, b string) {
		if ValidateID(a) != nil || ValidateID(b) != nil {
			return
		}
		ea, eb := EncodeID(a), EncodeID(b)
		if strings.ContainsAny(ea, "{}: *") {
			t.Fatalf("EncodeID(%q) = %q contains a reserved byte", a, ea)
		}
		if a != b && ea == eb {
			t.Fatalf("EncodeID(%q) == EncodeID(%q) == %q", a, b, ea)
		}
		if a != b && k.Record(k.Shard(a), a) == k.Record(k.Shard(b), b) {
			t.Fatalf("items %q and %q share a record key", a, b)
		}
		if got := hashTag(k.Record(k.Shard(a), a)); got != hashTag(k.Due(k.Shard(a))) {
			t.Fatalf("record of %q hashes on %q, not its shard", a, got)
		}
	})
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"7.0.15": true, "7.2.4": true, "8.0.0": true, "6.2.14": false, "5.0.7": false, "": true, "unknown": true} {
		if got := versionAtLeast(v, 7); got != want {
			t.Errorf("versionAtLeast(%q, 7) = %v, want %v", v, got, want)
		}
	}
}

// Shard is FNV-1a of the ID modulo the shard count, as hash/fnv computes
// it: a deployment's items must keep their shards across versions.
func TestShardIsFNV1a(t *testing.T) {
	k := NewKeys("syncd", 1024)
	for _, id := range []string{"", "a", "customer-42", "日本語", strings.Repeat("x", MaxIDLen), "\xff\x00"} {
		h := fnv.New32a()
		h.Write([]byte(id))
		if got, want := k.Shard(id), int(h.Sum32()%1024); got != want {
			t.Errorf("Shard(%q) = %d, hash/fnv gives %d", id, got, want)
		}
	}
}
