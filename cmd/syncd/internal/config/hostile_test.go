package config

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/syncd/syncd/cmd/syncd/internal/yamlstrict"
)

// aliasFlood is a config whose exec command is n aliases of a list: at
// a million, the file of issue #15 (4 MB), which took 12.8 s, 1.98 GB and
// printed 519 MB.
func aliasFlood(n int) string {
	return "items:\n  ids: &a [x]\nsink:\n  type: exec\n  exec:\n    command: [" + strings.Repeat("*a, ", n) + "]\n"
}

// billionLaughs is a small file whose aliases expand to 10^9 nodes.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("x0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "x%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	b.WriteString("items:\n  ids: *a8\n")
	return b.String()
}

// Hostile input is refused early, cheaply, and with a short message. The
// time and memory bounds are loose on purpose, for -race on a busy
// machine: they guard against a hang or an OOM, not a regression of a few
// percent, and a quadratic step on 100,000 errors takes minutes. The worst
// a file under 1 MiB can do, 200,000 errors, takes about 1.5 s (8 s with
// -race, more on a loaded machine): yaml.v3 parsing it twice.
func TestParseHostileInput(t *testing.T) {
	const aliases = "aliases expand to more than 10000 values; a configuration needs a few at most"
	var unknown strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&unknown, "k%d: 1\n", i)
	}
	tests := []struct {
		name string
		src  string
		want []string // the first lines of the error
		n    int      // the lines of the error
		took time.Duration
	}{
		{"a million aliases", aliasFlood(1_000_000), []string{"c.yaml: larger than 1048576 bytes (1 MiB), the limit for a configuration file"}, 1, 5 * time.Second},
		{"aliases under 1 MiB", aliasFlood(50_000), []string{"c.yaml:6: " + aliases}, 1, time.Minute},
		{"nested aliases", billionLaughs(), []string{"c.yaml:4: " + aliases}, 1, time.Minute},
		{"an alias cycle", "a: &a [*a]\n", []string{"c.yaml:1: " + aliases}, 1, time.Minute},
		{"many errors without aliases", "sink:\n  type: exec\n  exec:\n    command: [" + strings.Repeat("[x], ", 100_000) + "]\n",
			[]string{"c.yaml:4: sink.exec.command[0]: expected a string, got a list"}, yamlstrict.MaxErrors + 1, time.Minute},
		{"a few aliases, many errors", aliasFlood(2000), []string{"c.yaml:2: sink.exec.command[0]: expected a string, got a list"}, yamlstrict.MaxErrors + 1, time.Minute},
		{"many unknown keys", unknown.String(), []string{"c.yaml:1: k0: unknown key"}, yamlstrict.MaxErrors + 1, time.Minute},
		{"a long value", "ownership:\n  ttl: " + strings.Repeat("9", 100_000) + "x\n",
			[]string{`c.yaml:2: ownership.ttl: "` + strings.Repeat("9", yamlstrict.MaxShown) + `..." is not a duration (examples: 30s, 500ms, 2m)`}, 1, time.Minute},
		{"a long key", "? " + strings.Repeat("k", 100_000) + "\n: 1\n", []string{"c.yaml:1: " + strings.Repeat("k", yamlstrict.MaxShown) + "...: unknown key"}, 1, time.Minute},
		{"a key with escapes", "\"\\e[2J\": 1\n", []string{`c.yaml:1: "\x1b[2J": unknown key`}, 1, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := Parse("c.yaml", []byte(tt.src))
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			lines := errLines(err)
			if len(lines) != tt.n {
				t.Fatalf("%d lines of error; want %d:\n%.2000s", len(lines), tt.n, err)
			}
			if diff := cmp.Diff(lines[:len(tt.want)], tt.want); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
			if tt.n > yamlstrict.MaxErrors && !strings.HasSuffix(lines[yamlstrict.MaxErrors], " more problems") {
				t.Errorf("last line %q; want a count of the rest", lines[yamlstrict.MaxErrors])
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; took > tt.took || alloc > 512<<20 {
				t.Errorf("took %v and %d MB", took, alloc>>20)
			}
			// What loaded of it, as syncd validate checks it further.
			start = time.Now()
			if f, _ := ParsePartial("c.yaml", []byte(tt.src)); f != nil {
				checkPartial(t, f, fakeEnv(nil), fakeFiles(nil))
			}
			if took := time.Since(start); took > tt.took {
				t.Errorf("ParsePartial and the checks after took %v", took)
			}
		})
	}
}

// Load reads no more than it may parse: /dev/zero does not hang it.
func TestLoadBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte(aliasFlood(1_000_000)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		_, err := Load(path)
		want := []string{path + ": larger than 1048576 bytes (1 MiB), the limit for a configuration file"}
		if diff := cmp.Diff(errLines(err), want); diff != "" {
			t.Errorf("Load(%q) errors (-got +want):\n%s", path, diff)
		}
	}
}

// A file the config names that is no regular file says what it is: a
// directory said "not a regular file (d---------)" (an outside trial).
func TestReadRegularSaysWhatItIs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		dir:         "is a directory",
		fifo:        "not a regular file: a named pipe (FIFO)",
		"/dev/null": "not a regular file: a character device",
	} {
		if _, err := readRegular(path, secretFileMax, nil); err == nil || err.Error() != want {
			t.Errorf("readRegular(%q): %v, want %q", path, err, want)
		}
	}
	// As validate and run say it, at the field.
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("http:\n  api_token_file: "+dir+"\nitems:\n  file: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.APIToken(nil, nil)
	_, err2 := f.Items(nil)
	want := []string{path + ":2: http.api_token_file: " + dir + ": is a directory", path + ":4: items.file: " + dir + ": is a directory"}
	if diff := cmp.Diff(append(errLines(err), errLines(err2)...), want); diff != "" {
		t.Errorf("errors (-got +want):\n%s", diff)
	}
}
