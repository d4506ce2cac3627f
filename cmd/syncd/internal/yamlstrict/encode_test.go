package yamlstrict

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// encSection has a field of each type Decode reads and Encode writes.
type encSection struct {
	Name    string            `yaml:"name"`
	Enabled bool              `yaml:"enabled"`
	Count   int               `yaml:"count"`
	Wait    time.Duration     `yaml:"wait"`
	Tags    []string          `yaml:"tags"`
	Env     map[string]string `yaml:"env"`
}

type encDoc struct {
	A encSection `yaml:"a"`
	B encSection `yaml:"b"`
}

func TestEncode(t *testing.T) {
	v := encDoc{A: encSection{Name: "true", Enabled: true, Count: -3, Wait: 90 * time.Second,
		Tags: []string{"x", "10"}, Env: map[string]string{"b": "secret", "a": "1"}}}
	out, err := Encode(v, EncodeOptions{
		Comment: "Head.",
		Omit:    func(path string) bool { return path == "b.name" },
		String: func(path, s string) string {
			if path == "a.env.b" {
				return "[hidden]"
			}
			return s
		},
		Notes: map[string]string{"a.count": "not shown: not zero", "b.count": "0: none", "b.tags": "empty: all", "b.env": "empty: none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `# Head.

a:
  name: "true"
  enabled: true
  count: -3
  wait: 1m30s
  tags:
    - x
    - "10"
  env:
    a: "1"
    b: '[hidden]'
b:
  enabled: false
  count: 0 # 0: none
  wait: 0s
  tags: [] # empty: all
  env: {} # empty: none
`
	if diff := cmp.Diff(string(out), want); diff != "" {
		t.Errorf("Encode (-got +want):\n%s", diff)
	}
}

// What Encode writes, Decode reads back to the same value.
func TestEncodeRoundTrip(t *testing.T) {
	for _, v := range []encDoc{
		{},
		{A: encSection{Name: "null", Count: 1 << 40, Wait: -time.Hour, Tags: []string{"", "~", "a: b", "- c", "#d", "\x01\n"}}},
		{B: encSection{Name: "1.5", Wait: time.Hour + time.Nanosecond, Env: map[string]string{"<<": "*x", "": "&y", "k k": "yes"}}},
	} {
		roundTrip(t, v)
	}
}

func roundTrip(t *testing.T, v encDoc) {
	t.Helper()
	out, err := Encode(v, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got encDoc
	d, _ := Decode("e.yaml", out, &got, Options{})
	if err := d.Err(); err != nil {
		t.Fatalf("Encode output does not decode: %v\n%s", err, out)
	}
	if diff := cmp.Diff(got, v, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("decoded Encode output (-got +want):\n%s\n%s", diff, out)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 500 * time.Millisecond: "500ms", time.Minute: "1m", 90 * time.Second: "1m30s",
		2 * time.Hour: "2h", time.Hour + time.Minute: "1h1m", time.Hour + time.Second: "1h0m1s", -time.Minute: "-1m",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q; want %q", d, got, want)
		}
		if back, err := time.ParseDuration(want); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", want, back, err, d)
		}
	}
}

// FuzzEncode: every file that decodes without a problem encodes to a
// file that decodes to the same value.
func FuzzEncode(f *testing.F) {
	f.Add("a:\n  name: x\n  count: 2\n  wait: 1m\n  tags: [a, '1']\nb:\n  env: {k: v, '<<': y}\n")
	f.Add("b:\n  name: \"\\x01\\t\"\n  enabled: true\n")
	f.Fuzz(func(t *testing.T, src string) {
		var v encDoc
		if d, _ := Decode("f.yaml", []byte(src), &v, Options{}); d.Err() != nil {
			return
		}
		roundTrip(t, v)
	})
}
