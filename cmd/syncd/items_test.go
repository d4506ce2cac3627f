package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

// syncd runs the command line args and returns its exit code, stdout and
// stderr.
func syncd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

// itemSet returns which of ids are in st's item set.
func itemSet(t *testing.T, st *store.Store, ids ...string) []string {
	t.Helper()
	unknown, err := st.Unknown(context.Background(), ids...)
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, id := range unknown {
		gone[id] = true
	}
	var in []string
	for _, id := range ids {
		if !gone[id] {
			in = append(in, id)
		}
	}
	return in
}

// items add --file is all or nothing: every bad line is named by its
// number, long lines too, and nothing is added. Before, the first bad
// line stopped the read, and a line over 1 MiB was reported as
// "bufio.Scanner: token too long".
func TestItemsFileAllOrNothing(t *testing.T) {
	cfg, st := adminConfig(t, "file")
	long := strings.Repeat("x", 600)
	tests := []struct {
		name, file, stderr string
	}{
		{"a bad line in the middle", "a\nb\n\x01bad\nc\n",
			"syncd items: nothing added: ids.txt has 1 invalid line:\n" +
				`syncd items: ids.txt:3: invalid item id "\x01bad": control character U+0001 at byte 0` + "\n"},
		{"a 600-byte line", "a\n" + long + "\nb\n",
			"syncd items: nothing added: ids.txt has 1 invalid line:\n" +
				`syncd items: ids.txt:2: invalid item id "` + long[:64] + `...": 600 bytes long, the limit is 512` + "\n"},
		{"a line over 1 MiB and a bad one", "a\n" + strings.Repeat("y", 2<<20) + "\nb\n\x02\n",
			"syncd items: nothing added: ids.txt has 2 invalid lines:\n" +
				"syncd items: ids.txt:2: line of 2097152 bytes, longer than any item id\n" +
				`syncd items: ids.txt:4: invalid item id "\x02": control character U+0002 at byte 0` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := testutil.WriteFile(t, "ids.txt", tt.file)
			code, out, stderr := syncd("items", "add", "-c", cfg, "--file", file)
			stderr = strings.ReplaceAll(stderr, file, "ids.txt")
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", code, out, exitUsage)
			}
			if diff := cmp.Diff(stderr, tt.stderr); diff != "" {
				t.Errorf("stderr (-got +want):\n%s", diff)
			}
			if in := itemSet(t, st, "a", "b", "c"); in != nil {
				t.Errorf("added %q; want nothing", in)
			}
		})
	}
}

// --file - reads standard input, named "stdin" in errors; CRLF line ends
// and a byte order mark are dropped; arguments and lines are counted
// once each.
func TestItemsFileStdinAndCRLF(t *testing.T) {
	cfg, st := adminConfig(t, "stdin")
	saved := stdin
	t.Cleanup(func() { stdin = saved })

	stdin = strings.NewReader("\ufeffs1\r\n# comment\r\ns2\r\n\r\ns1\r\n")
	code, out, stderr := syncd("items", "add", "-c", cfg, "s2", "s3", "--file", "-")
	if code != exitOK || out != "3 of 3 items added\n" {
		t.Errorf("items add --file -: exit %d, %q, %q; want 3 of 3 added", code, out, stderr)
	}
	if in := itemSet(t, st, "s1", "s2", "s3", "s1\r"); !cmp.Equal(in, []string{"s1", "s2", "s3"}) {
		t.Errorf("item set holds %q; want s1, s2, s3", in)
	}
	// An ID already there is marked added by hand too, and the output
	// says so.
	if code, out, _ := syncd("items", "add", "-c", cfg, "s1", "s9"); code != exitOK || !strings.HasPrefix(out, "1 of 2 items added; 1 already in the set, now also marked added by hand") {
		t.Errorf("items add of a known and a new ID: exit %d, %q", code, out)
	}

	stdin = strings.NewReader("s4\n\x7f\n")
	code, _, stderr = syncd("items", "add", "-c", cfg, "--file", "-")
	want := "syncd items: nothing added: stdin has 1 invalid line:\n" +
		`syncd items: stdin:2: invalid item id "\x7f": control character U+007F at byte 0` + "\n"
	if code != exitUsage || stderr != want {
		t.Errorf("items add --file - of a bad line: exit %d, %q; want %d, %q", code, stderr, exitUsage, want)
	}

	stdin = strings.NewReader("s1\r\ns3\r\n")
	if code, out, stderr := syncd("items", "remove", "-c", cfg, "--file", "-"); code != exitOK || out != "2 of 2 items removed\n" {
		t.Errorf("items remove --file -: exit %d, %q, %q; want 2 of 2 removed", code, out, stderr)
	}

	// A file that cannot be read says so once, after --file and its
	// path: a directory read "/tmp: read /tmp: is a directory" (an
	// outside trial).
	dir, missing := t.TempDir(), filepath.Join(t.TempDir(), "nosuch")
	for path, want := range map[string]string{
		dir:     "syncd items: --file " + dir + ": is a directory\n",
		missing: "syncd items: --file " + missing + ": no such file or directory\n",
	} {
		if code, _, stderr := syncd("items", "add", "-c", cfg, "--file", path); code != exitUsage || stderr != want {
			t.Errorf("items add --file %s: exit %d, %q; want %d, %q", path, code, stderr, exitUsage, want)
		}
	}
}

// requeue and items remove change the known items, say how many, and
// name every unknown id, exiting 1. Before, requeue only counted them
// and remove exited 0.
func TestRequeueRemoveNameUnknownIDs(t *testing.T) {
	cfg, st := adminConfig(t, "unknown")
	if _, err := st.Add(context.Background(), "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"requeue", "a", "ghost-1", "b", "ghost-2", "a"}, exitFailed, "2 of 4 items requeued\n",
			"syncd requeue: 2 unknown ids (not in the item set): ghost-1, ghost-2\n"},
		{[]string{"requeue", "a", "b"}, exitOK, "2 of 2 items requeued\n", ""},
		{[]string{"requeue", "a", "bad\x01", "x\x1b"}, exitUsage, "",
			"syncd requeue: nothing requeued: " + `invalid item id "bad\x01": control character U+0001 at byte 3` + "\n" +
				`syncd requeue: invalid item id "x\x1b": control character U+001B at byte 1` + "\n"},
		{[]string{"items", "remove", "b", "ghost", "", "\x1b[31m"}, exitFailed, "1 of 4 items removed\n",
			`syncd items: 3 unknown ids (not in the item set): ghost, "", \x1b[31m` + "\n"},
		{[]string{"items", "remove", "c"}, exitOK, "1 of 1 item removed\n", ""},
	}
	for _, tt := range tests {
		code, out, stderr := syncd(append(tt.args, "-c", cfg)...)
		if code != tt.code || out != tt.stdout || stderr != tt.stderr {
			t.Errorf("syncd %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, out, stderr, tt.code, tt.stdout, tt.stderr)
		}
	}
	if in := itemSet(t, st, "a", "b", "c"); !cmp.Equal(in, []string{"a"}) {
		t.Errorf("item set holds %q; want a", in)
	}
}

// An unknown ID fails release as it fails requeue and trigger: exit 1,
// named, where release exited 2, a usage error (an outside trial). A bad
// ID is still bad input (exit 2).
func TestUnknownIDExitsOne(t *testing.T) {
	cfg, st := adminConfig(t, "unk")
	if _, err := st.Add(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"release", "--force", "nope"}, exitFailed, "syncd release: unknown item: \"nope\"\n"},
		{[]string{"requeue", "nope"}, exitFailed, "syncd requeue: 1 unknown id (not in the item set): nope\n"},
		{[]string{"trigger", "nope"}, exitFailed, "syncd trigger: 1 unknown id (not in the item set; --add adds it): nope\n"},
		{[]string{"release", "--force", "bad\x01"}, exitUsage, ""},
	} {
		code, _, errb := syncd(append(tt.args, "-c", cfg)...)
		if code != tt.code || tt.stderr != "" && errb != tt.stderr {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", tt.args, code, errb, tt.code, tt.stderr)
		}
	}
	if code, out, errb := syncd("release", "--force", "a", "-c", cfg); code != exitOK || !strings.HasPrefix(out, "a: was not claimed; fence raised to ") {
		t.Errorf("release a: exit %d, stdout %q, stderr %q", code, out, errb)
	}
}

// requeue --state quarantined brings back every quarantined item at
// once (after a target outage quarantined them, say), with or beside
// IDs and --file; other states are refused.
func TestRequeueState(t *testing.T) {
	cfg, st := adminConfig(t, "rqstate")
	ctx := context.Background()
	st.Add(ctx, "a", "b", "q1", "q2", "q3")
	for _, id := range []string{"q1", "q2", "q3"} {
		st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard(id)), redisInf(id))
	}
	st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard("a")), redisZ(t, st, time.Hour, "a"))
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"requeue", "--state", "due"}, exitUsage, "", "syncd requeue: --state \"due\": requeue takes quarantined or backing_off\n"},
		{[]string{"requeue", "--state", "quarantined"}, exitOK, "3 of 3 items requeued\n", ""},
		{[]string{"requeue", "--state", "quarantined"}, exitOK, "no item quarantined\n", ""},
		{[]string{"requeue", "--state", "quarantined", "a"}, exitOK, "1 of 1 item requeued\n", ""},
	}
	for i, tt := range tests {
		code, out, stderr := syncd(append(tt.args, "-c", cfg)...)
		if code != tt.code || out != tt.stdout || !strings.HasPrefix(stderr, tt.stderr) || (tt.stderr == "") != (stderr == "") {
			t.Errorf("syncd %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, out, stderr, tt.code, tt.stdout, tt.stderr)
		}
		if i == 1 {
			for _, id := range []string{"q1", "q2", "q3"} {
				if d := testutil.DueIn(t, st, id); d > 0 {
					t.Errorf("%s due in %v after requeue --state quarantined", id, d)
				}
			}
		}
	}
	if d := testutil.DueIn(t, st, "a"); d > 0 {
		t.Errorf("a due in %v after its requeue", d)
	}

	path := filepath.Join(t.TempDir(), "ids")
	if err := os.WriteFile(path, []byte("# ids\nb\nghost\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := syncd("requeue", "-c", cfg, "--file", path)
	if code != exitFailed || out != "1 of 2 items requeued\n" || stderr != "syncd requeue: 1 unknown id (not in the item set): ghost\n" {
		t.Errorf("requeue --file: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
