package yamlstrict

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type section struct {
	Name  string        `yaml:"name"`
	Count int           `yaml:"count"`
	Wait  time.Duration `yaml:"wait"`
	Tags  []string      `yaml:"tags"`
}

type doc struct {
	Sec section `yaml:"sec"`
}

func decodeText(t *testing.T, src string) (*Decoder, doc, string) {
	t.Helper()
	var d doc
	dec, _ := Decode("t.yaml", []byte(src), &d, Options{Hints: map[string]string{"sec.secret": "not here"}, TopLevel: "want sections"})
	if err := dec.Err(); err != nil {
		return dec, d, err.Error()
	}
	return dec, d, ""
}

// Every problem of a file comes back at once, each with its line and
// field, in line order.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, _, got := decodeText(t, "sec:\n  nmae: x\n  count: 1.5\n  wait: 3x\n  tags: [a, ~]\n  secret: s\n  count: 2\n")
	want := strings.Join([]string{
		"t.yaml:2: sec.nmae: unknown key (did you mean name?)",
		"t.yaml:3: sec.count: expected a whole number, got \"1.5\"",
		"t.yaml:4: sec.wait: \"3x\" is not a duration (examples: 30s, 500ms, 2m)",
		"t.yaml:5: sec.tags[1]: expected a string, got nothing",
		"t.yaml:6: sec.secret: not here",
		"t.yaml:7: sec.count: duplicate key (first at line 3)",
	}, "\n")
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A number too large for its field says so, with the limit, where a
// duration past 292 years said it "is not a duration" and a whole number
// past an int that a whole number was expected (an outside trial).
func TestDecodeTooLarge(t *testing.T) {
	_, _, got := decodeText(t, "sec:\n  wait: 99999999999h\n  count: 99999999999999999999\n")
	want := "t.yaml:2: sec.wait: \"99999999999h\" is too large (at most 2562047h)\n" +
		"t.yaml:3: sec.count: 99999999999999999999 is too large (at most 9223372036854775807)"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for in, want := range map[string]string{
		"count: -10000000000000000000":  "t.yaml:2: sec.count: -10000000000000000000 is too small (at least -9223372036854775808)",
		"count: 10000000000000000000":   "t.yaml:2: sec.count: 10000000000000000000 is too large (at most 9223372036854775807)",
		`count: "99999999999999999999"`: `t.yaml:2: sec.count: expected a whole number, got "99999999999999999999"`,
		"count: 1e30":                   `t.yaml:2: sec.count: expected a whole number, got "1e30"`,
		"wait: 2562047h":                "",
		"wait: 1.5h99999999999s":        `t.yaml:2: sec.wait: "1.5h99999999999s" is too large (at most 2562047h)`,
		"wait: 99999999999x":            `t.yaml:2: sec.wait: "99999999999x" is not a duration (examples: 30s, 500ms, 2m)`,
		"wait: .h":                      `t.yaml:2: sec.wait: ".h" is not a duration (examples: 30s, 500ms, 2m)`,
	} {
		if _, _, got := decodeText(t, "sec:\n  "+in+"\n"); got != want {
			t.Errorf("%s: got %q, want %q", in, got, want)
		}
	}
}

// Options.Want says what a field that takes one of a few words expects;
// another field keeps the generic message.
func TestDecodeWant(t *testing.T) {
	var d doc
	opt := Options{Want: map[string]string{"sec.name": "one of a (the default) or b"}}
	dec, _ := Decode("t.yaml", []byte("sec:\n  name: [a]\n  tags: [~]\n"), &d, opt)
	want := "t.yaml:2: sec.name: expected one of a (the default) or b, got a list\n" +
		"t.yaml:3: sec.tags[0]: expected a string, got nothing"
	if got := dec.Err(); got == nil || got.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", got, want)
	}
}

func TestDecodeValuesAndKeys(t *testing.T) {
	dec, d, errs := decodeText(t, "sec:\n  name: a\n  wait: 500ms\n  tags: [x]\n")
	if errs != "" {
		t.Fatal(errs)
	}
	if d.Sec.Name != "a" || d.Sec.Wait != 500*time.Millisecond || len(d.Sec.Tags) != 1 {
		t.Errorf("decoded %+v", d)
	}
	if k, ok := dec.Keys["sec.wait"]; !ok || k.Line != 3 {
		t.Errorf("sec.wait at %+v, %v; want line 3", k, ok)
	}
	if _, ok := dec.Keys["sec.count"]; ok {
		t.Error("sec.count is not set, but Keys has it")
	}
}

func TestDecodeWholeFileProblems(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"- a\n", "t.yaml:1: want sections, got a list"},
		{"a: 1\n---\nb: 2\n", "t.yaml:2: a second YAML document: the file must hold one"},
		{"sec:\n  name: [\n", "t.yaml:2: malformed YAML: did not find expected node content"},
		{"a: &a [*a]\n", "aliases expand to more than"},
		{"sec: {<<: {name: a}}\n", "t.yaml:1: sec.<<: merge keys are not supported"},
	} {
		if _, _, got := decodeText(t, tt.src); !strings.Contains(got, tt.want) {
			t.Errorf("%q: got %q, want it to contain %q", tt.src, got, tt.want)
		}
	}
}

// Line finds a field's line, else an alternative's, else its section's.
func TestKeysLine(t *testing.T) {
	dec, _, errs := decodeText(t, "sec:\n  name: a\n  tags: [x,\n    y]\n")
	if errs != "" {
		t.Fatal(errs)
	}
	for _, tt := range []struct {
		field string
		alt   []string
		want  int
	}{
		{"sec.name", nil, 2}, {"sec.tags[1]", nil, 4}, {"sec.count", nil, 1},
		{"sec.count", []string{"sec.wait", "sec.tags"}, 3}, {"other.x", nil, 0},
	} {
		if got := dec.Keys.Line(tt.field, tt.alt...); got != tt.want {
			t.Errorf("Line(%q, %q) = %d; want %d", tt.field, tt.alt, got, tt.want)
		}
	}
}

// Failed covers a field, what is inside it, and a file that failed whole.
func TestFailed(t *testing.T) {
	dec, _, _ := decodeText(t, "sec:\n  count: x\n  tags: [a, ~]\n")
	for field, want := range map[string]bool{"sec.count": true, "sec": true, "sec.tags": true, "sec.name": false, "sec.ta": false} {
		if got := dec.Failed(field); got != want {
			t.Errorf("Failed(%q) = %v; want %v", field, got, want)
		}
	}
	if dec, _, _ := decodeText(t, "sec: [\n"); !dec.Failed("sec.name") {
		t.Error("Failed is false after a syntax error")
	}
}

// Problems holds every field with a problem: those that did not decode,
// and those a caller's rules (Add, RefuseZeros) found, past the problems
// kept too.
func TestProblems(t *testing.T) {
	var d doc
	dec, _ := Decode("t.yaml", []byte("sec:\n  count: x\n  name: ''\n  wait: 5s\n"), &d, Options{})
	dec.RefuseZeros(doc{Sec: section{Name: "dflt"}})
	dec.Add(&FieldError{File: "t.yaml", Line: 4, Field: "sec.wait", Msg: "too long"})
	for field, want := range map[string]bool{"sec.count": true, "sec.name": true, "sec.wait": true, "sec": true, "sec.tags": false} {
		if got := dec.Problems.Has(field); got != want {
			t.Errorf("Problems.Has(%q) = %v; want %v", field, got, want)
		}
	}
	if dec.Failed("sec.name") || dec.Failed("sec.wait") {
		t.Error("Failed is true for a field that decoded and broke a rule")
	}
	for range maxKept {
		dec.Add(&FieldError{File: "t.yaml", Field: "sec.count", Msg: "again"})
	}
	if dec.Add(&FieldError{File: "t.yaml", Field: "sec.tags[0]", Msg: "past the kept"}); !dec.Problems.Has("sec.tags") {
		t.Error("a problem past the kept ones is not in Problems")
	}
	if dec, _, _ := decodeText(t, "sec: [\n"); !dec.Problems.Has("sec.name") {
		t.Error("Problems has not sec.name after a syntax error")
	}
}

// A zero written out, where the default is not zero, is a problem; so
// is a number or a duration set to nothing, whatever its default (it
// took the default, as a key left out does: `shards:` alone named a
// deployment of 16 shards); a key left out, a string, a list or a
// section set to nothing, or a key already bad, is not.
func TestRefuseZeros(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"sec:\n  name: ''\n  count: 0\n  wait: 0s\n  tags: []\n", strings.Join([]string{
			`t.yaml:2: sec.name: "" is not allowed: leave the key out for the default ("dflt")`,
			"t.yaml:3: sec.count: 0 is not allowed: leave the key out for the default (4)",
			"t.yaml:4: sec.wait: 0s is not allowed: leave the key out for the default (1m)",
		}, "\n")},
		{"sec:\n  name: ~\n  wait: 1s\n  tags:\n", ""},
		{"sec:\n", ""},
		{"sec:\n  count:\n  wait: ~\n", strings.Join([]string{
			"t.yaml:2: sec.count: expected a whole number, got nothing: give one, or leave the key out for the default (4)",
			"t.yaml:3: sec.wait: expected a duration such as 30s, got nothing: give one, or leave the key out for the default (1m)",
		}, "\n")},
		{"sec:\n  count: 0x\n", `t.yaml:2: sec.count: expected a whole number, got "0x"`},
	} {
		var d doc
		dec, _ := Decode("t.yaml", []byte(tt.src), &d, Options{})
		dec.RefuseZeros(doc{Sec: section{Name: "dflt", Count: 4, Wait: time.Minute, Tags: []string{"x"}}})
		got := ""
		if err := dec.Err(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%q: got\n%s\nwant\n%s", tt.src, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	if got := Clip(strings.Repeat("é", 50)); len(got) > MaxShown+3 || !strings.HasSuffix(got, "...") {
		t.Errorf("Clip = %q", got)
	}
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
}

// FuzzDecode: no input panics, and every problem names the file.
func FuzzDecode(f *testing.F) {
	f.Add("sec:\n  name: a\n  count: 2\n")
	f.Add("a: &a [*a, *a]\n")
	f.Add("sec: {<<: *x}\n")
	f.Fuzz(func(t *testing.T, src string) {
		var d doc
		dec, _ := Decode("f.yaml", []byte(src), &d, Options{})
		if err := dec.Err(); err != nil {
			for _, fe := range err.(*Errors).List {
				if fe.File != "f.yaml" {
					t.Fatalf("problem without the file: %v", fe)
				}
			}
		}
	})
}

// Only true and false are booleans: yaml.v3 took YAML 1.1's y, yes, on
// (and n, no, off) into a bool, quoted or not, but refused "true".
func TestBoolsAreTrueOrFalse(t *testing.T) {
	type flags struct {
		On bool `yaml:"on_"`
	}
	for src, want := range map[string]string{
		"on_: true":   "",
		"on_: false":  "",
		"on_: yes":    `t.yaml:1: on_: expected true or false, got "yes"`,
		`on_: "yes"`:  `t.yaml:1: on_: expected true or false, got "yes"`,
		"on_: y":      `t.yaml:1: on_: expected true or false, got "y"`,
		"on_: off":    `t.yaml:1: on_: expected true or false, got "off"`,
		`on_: "true"`: `t.yaml:1: on_: expected true or false, got "true"`,
		"on_: 1":      `t.yaml:1: on_: expected true or false, got "1"`,
	} {
		var f flags
		dec, _ := Decode("t.yaml", []byte(src), &f, Options{})
		got := ""
		if err := dec.Err(); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", src, got, want)
		}
	}
}

// A problem is one line: a message that quotes a path or value with a
// newline or another control character in it has them escaped, so that
// it neither breaks the line nor forges one of its own (a second outside
// trial: a stat error of sink.exec.dir "/tmp/no\ndir" spread over two
// lines, the second without file:line).
func TestFieldErrorOneLine(t *testing.T) {
	e := &FieldError{File: "c.yaml", Line: 4, Field: "sink.exec.dir", Msg: "stat /tmp/no\ndir\x1b[31m: no such file or directory"}
	if got, want := e.Error(), `c.yaml:4: sink.exec.dir: stat /tmp/no\ndir\x1b[31m: no such file or directory`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if e := (&FieldError{File: "c.yaml", Msg: "plain é"}); e.Error() != "c.yaml: plain é" {
		t.Errorf("Error() = %q", e.Error())
	}
}
