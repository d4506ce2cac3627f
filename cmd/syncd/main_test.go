package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The command's own paths; tests/e2e runs the built binary end to end.
// Config files are written 0600: 0644 is 0664 under umask 002, which
// every command refuses (TestConfigFileWritable); the directory is
// private, as secret files need.
func TestRunMain(t *testing.T) {
	dir := testutil.PrivateDir(t)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("engine:\n  workerz: 3\n"), 0o600)
	// Valid YAML that run refuses: validate must refuse it too.
	unreach := filepath.Join(dir, "unreach.yaml") // port 1: refused at once
	os.WriteFile(unreach, []byte("redis:\n  addrs: [\"127.0.0.1:1\"]\n  dial_timeout: 1s\n"), 0o600)
	noItemsProg := filepath.Join(dir, "noitemsprog.yaml")
	os.WriteFile(noItemsProg, []byte("items:\n  command: [\"/nonexistent/list\"]\n"), 0o600)
	noProg := filepath.Join(dir, "noprog.yaml")
	os.WriteFile(noProg, []byte("sink:\n  type: exec\n  exec:\n    command: [\"/nonexistent/prog\"]\n"), 0o600)
	// What run refuses that validate passed (an operator's trial): the
	// API token's file missing or too short, its variable unset, the
	// file sink's directory missing.
	short := filepath.Join(dir, "short.tok")
	os.WriteFile(short, []byte("12345"), 0o600)
	noTok := filepath.Join(dir, "notok.yaml")
	os.WriteFile(noTok, []byte("http:\n  api_token_file: /nonexistent/tok\n"), 0o600)
	shortTok := filepath.Join(dir, "shorttok.yaml")
	os.WriteFile(shortTok, []byte("http:\n  api_token_file: "+short+"\n"), 0o600)
	unsetTok := filepath.Join(dir, "unsettok.yaml")
	os.WriteFile(unsetTok, []byte("http:\n  api_token_env: SYNCD_TEST_UNSET_TOKEN\n"), 0o600)
	// Not a regular file, or too long to be a token (an attacker's
	// trial: /dev/urandom grew to 3.9 GB, a FIFO hung validate).
	devTok := filepath.Join(dir, "devtok.yaml")
	os.WriteFile(devTok, []byte("http:\n  api_token_file: /dev/zero\n"), 0o600)
	fifo := filepath.Join(dir, "tok.fifo")
	syscall.Mkfifo(fifo, 0o600)
	fifoTok := filepath.Join(dir, "fifotok.yaml")
	os.WriteFile(fifoTok, []byte("http:\n  api_token_file: "+fifo+"\n"), 0o600)
	long := filepath.Join(dir, "long.tok")
	os.WriteFile(long, bytes.Repeat([]byte("t"), 70<<10), 0o600)
	longTok := filepath.Join(dir, "longtok.yaml")
	os.WriteFile(longTok, []byte("http:\n  api_token_file: "+long+"\n"), 0o600)
	noDir := filepath.Join(dir, "nodir.yaml")
	os.WriteFile(noDir, []byte("sink:\n  type: file\n  file:\n    path: /nonexistent/dir/x.jsonl\n"), 0o600)
	// A problem in the file and one the checks after it find, reported in
	// one run (an outside trial: the second came out only once the first
	// was fixed).
	loadAndTok := filepath.Join(dir, "loadandtok.yaml")
	os.WriteFile(loadAndTok, []byte("engine:\n  workerz: 3\nhttp:\n  api_token_file: /nonexistent/tok\n"), 0o600)
	// A token file any user can read: a warning; one others can write:
	// refused (an outside trial found a 0666 token file taken silently).
	readable, writable := filepath.Join(dir, "readable.tok"), filepath.Join(dir, "writable.tok")
	for path, mode := range map[string]os.FileMode{readable: 0o644, writable: 0o666} {
		os.WriteFile(path, []byte("s3cret-API-token-never-shown\n"), 0o600)
		os.Chmod(path, mode) // whatever the umask
	}
	readableTok, writableTok := filepath.Join(dir, "readabletok.yaml"), filepath.Join(dir, "writabletok.yaml")
	os.WriteFile(readableTok, []byte("http:\n  api_token_file: "+readable+"\n"), 0o600)
	os.WriteFile(writableTok, []byte("http:\n  api_token_file: "+writable+"\n"), 0o600)
	// validate's problems come in the file's line order, whichever check
	// found them (an outside trial: lines 4, 13, 6, 9).
	ordered := filepath.Join(dir, "ordered.yaml")
	os.WriteFile(ordered, []byte("http:\n  api_token_file: /nonexistent/tok\nitems:\n  command: [\"/nonexistent/list\"]\nengine:\n  workerz: 3\nsink:\n  type: exec\n  exec:\n    command: [\"/nonexistent/prog\"]\n"), 0o600)
	noProgs := filepath.Join(dir, "noprogs.yaml") // both reported at once
	os.WriteFile(noProgs, []byte("items:\n  command: [\"/nonexistent/list\"]\nsink:\n  type: exec\n  exec:\n    command: [\"/nonexistent/prog\"]\n"), 0o600)
	// A program others can write: run, batch and validate refuse it
	// before anything starts (run would run their code as syncd's user).
	prog := filepath.Join(dir, "push")
	os.WriteFile(prog, []byte("#!/bin/sh\nexit 0\n"), 0o600)
	os.Chmod(prog, 0o775)
	openProg := filepath.Join(dir, "openprog.yaml")
	os.WriteFile(openProg, []byte("sink:\n  type: exec\n  exec:\n    command: [\""+prog+"\"]\n"), 0o600)
	openProgErr := "openprog.yaml:4: sink.exec.command: " + prog + " is writable by group (mode 0775): they could replace the program syncd runs; chmod go-w " + prog
	openItemsProg := filepath.Join(dir, "openitemsprog.yaml") // reconcile runs items.command (an outside trial: it ran one run refused)
	os.WriteFile(openItemsProg, []byte("redis:\n  addrs: [\"127.0.0.1:1\"]\nitems:\n  command: [\""+prog+"\"]\n"), 0o600)
	openItemsProgErr := "openitemsprog.yaml:4: items.command: " + prog + " is writable by group (mode 0775): they could replace the program syncd runs; chmod go-w " + prog
	tests := []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{nil, exitUsage, "", "usage:"},
		{[]string{"validate", "-c", openProg}, exitUsage, "", openProgErr},
		{[]string{"run", "-c", openProg}, exitUsage, "", "syncd run: " + openProg[:len(openProg)-len("openprog.yaml")] + openProgErr},
		{[]string{"batch", "-c", openProg}, exitUsage, "", "syncd batch: " + openProg[:len(openProg)-len("openprog.yaml")] + openProgErr},
		{[]string{"items", "reconcile", "-c", openItemsProg}, exitUsage, "", "syncd items: " + openItemsProg[:len(openItemsProg)-len("openitemsprog.yaml")] + openItemsProgErr},
		{[]string{"help"}, exitOK, "usage:", ""},
		{[]string{"version"}, exitOK, "syncd ", ""},
		{[]string{"bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"validate", "-c", bad}, exitUsage, "", "bad.yaml:2: engine.workerz: unknown key"},
		{[]string{"validate", "-c", filepath.Join(dir, "missing.yaml")}, exitUsage, "", "missing.yaml"},
		{[]string{"status", "-c", unreach}, exitUsage, "", "unreach.yaml:2: redis.addrs: connect to 127.0.0.1:1: dial tcp: connect: connection refused"},
		{[]string{"validate", "-c", noItemsProg}, exitUsage, "", "noitemsprog.yaml:2: items.command: exec: \"/nonexistent/list\""},
		{[]string{"validate", "-c", noProg}, exitUsage, "", "noprog.yaml:4: sink.exec.command: \"/nonexistent/prog\""},
		{[]string{"validate", "-c", noTok}, exitUsage, "", "notok.yaml:2: http.api_token_file: /nonexistent/tok"},
		{[]string{"validate", "-c", shortTok}, exitUsage, "", "the shortest accepted is 16"},
		{[]string{"validate", "-c", unsetTok}, exitUsage, "", "unsettok.yaml:2: http.api_token_env: environment variable SYNCD_TEST_UNSET_TOKEN is not set"},
		{[]string{"validate", "-c", devTok}, exitUsage, "", "devtok.yaml:2: http.api_token_file: /dev/zero: not a regular file"},
		{[]string{"validate", "-c", fifoTok}, exitUsage, "", "not a regular file"},
		{[]string{"validate", "-c", longTok}, exitUsage, "", "71680 bytes, more than the 65536 read"},
		{[]string{"validate", "-c", noDir}, exitUsage, "", `nodir.yaml:4: sink.file.path: parent directory of "/nonexistent/dir/x.jsonl"`},
		{[]string{"validate", "-c", noProgs}, exitUsage, "", "no such file or directory\n" + noProgs + ":6: sink.exec.command"},
		{[]string{"validate", "-c", ordered}, exitUsage, "", ordered + ":2: http.api_token_file: /nonexistent/tok: no such file or directory\n" +
			ordered + ":4: items.command: exec: \"/nonexistent/list\": stat /nonexistent/list: no such file or directory\n" +
			ordered + ":6: engine.workerz: unknown key (did you mean workers?)\n" + ordered + ":10: sink.exec.command"},
		{[]string{"validate", "-c", loadAndTok}, exitUsage, "", loadAndTok + ":2: engine.workerz: unknown key (did you mean workers?)\n" +
			loadAndTok + ":4: http.api_token_file: /nonexistent/tok: no such file or directory\n"},
		{[]string{"validate", "-c", readableTok}, exitOK, "api_token_file: " + readable, "warning: " + readableTok + ":2: http.api_token_file: " +
			readable + " is readable by others (mode 0644): any user on the host can read the API token; chmod 600 " + readable + "\n"},
		{[]string{"validate", "-c", writableTok}, exitUsage, "", writableTok + ":2: http.api_token_file: " + writable +
			" is writable by group and others (mode 0666): they could replace the API token; chmod 600 " + writable + "\n"},
		{[]string{"items", "-c", bad}, exitUsage, "", "add, remove, list or reconcile"},
		{[]string{"release", "-c", bad, "x"}, exitUsage, "", "--force"},
		{[]string{"requeue", "-c", bad}, exitUsage, "", "no IDs"},
		{[]string{"run", "--nope"}, exitUsage, "", "flag provided but not defined"},
		{[]string{"help"}, exitOK, "syncd ui ", ""},
		{[]string{"ui", "-c", bad}, exitUsage, "", "bad.yaml:2: engine.workerz: unknown key"},
		// Arguments a command does not take are refused, named, before
		// anything else (an outside trial: status, validate and run ran
		// as if they were not there).
		{[]string{"ui", "-c", bad, "extra"}, exitUsage, "", `syncd ui: unexpected argument "extra": ui takes no arguments (syncd ui -h lists its flags)`},
		{[]string{"status", "-c", bad, "a", "b"}, exitUsage, "", `syncd status: unexpected arguments "a", "b": status takes no arguments`},
		{[]string{"validate", "-c", bad, "extra"}, exitUsage, "", `syncd validate: unexpected argument "extra": validate takes no arguments`},
		{[]string{"run", "x", "-c", bad}, exitUsage, "", `syncd run: unexpected argument "x": run takes no arguments`},
		{[]string{"batch", "-c", bad, "--max-unavailable", "-1s"}, exitUsage, "", "syncd batch: --max-unavailable -1s is negative: give how long the target may stay unavailable, or 0 to wait for it for ever\n"},
		{[]string{"batch", "-c", bad, "--", "-x"}, exitUsage, "", `syncd batch: unexpected argument "-x": batch takes no arguments`},
		{[]string{"items", "list", "-c", bad, "x"}, exitUsage, "", `syncd items: unexpected argument "x": items list takes no arguments`},
		{[]string{"items", "reconcile", "-c", bad, "x"}, exitUsage, "", `syncd items: unexpected argument "x": items reconcile takes no arguments`},
		{[]string{"version", "x"}, exitUsage, "", "syncd version: unexpected argument \"x\": version takes no arguments\n"},
		{[]string{"release", "-c", bad, "--force", "a", "b"}, exitUsage, "", `syncd release: unexpected argument "b": release takes exactly one ID`},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := runMain(tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errb.String(), tt.inErr) {
			t.Errorf("syncd %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tt.args, code, out.String(), errb.String(), tt.code, tt.out, tt.inErr)
		}
	}
}

// Every command that loads a config refuses one that others can write,
// naming it, its mode, why and the fix (an outside trial: a 0666
// config.yaml, which names the exec sink's command, was taken). Without
// the check each would fail only later, at the token file or at Redis.
func TestConfigFileWritable(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("redis:\n  addrs: [\"127.0.0.1:1\"]\n  dial_timeout: 1s\nhttp:\n  api_token_file: /nonexistent/tok\n"), 0o600)
	os.Chmod(cfg, 0o666) // whatever the umask
	want := "syncd %s: " + cfg + ": writable by group and others (mode 0666): they could replace the configuration, " +
		"which names the programs syncd runs (sink.exec.command, items.command) and where it sends data (sink.http.url); chmod go-w " + cfg + "\n"
	for _, args := range [][]string{
		{"run"}, {"batch"}, {"ui", "--listen", "127.0.0.1:0"}, {"status"}, {"status", "--json"},
		{"items", "add", "x"}, {"items", "remove", "x"}, {"items", "list"}, {"items", "reconcile"},
		{"requeue", "x"}, {"trigger", "x"}, {"release", "--force", "x"},
	} {
		var out, errb bytes.Buffer
		code := runMain(append(args, "-c", cfg), &out, &errb)
		if w := fmt.Sprintf(want, args[0]); code != exitUsage || errb.String() != w || out.Len() > 0 {
			t.Errorf("syncd %q: exit %d, stdout %q, stderr %q; want exit 2 and only %q", args, code, out.String(), errb.String(), w)
		}
	}
	// validate says it first, then the file's other problems.
	var out, errb bytes.Buffer
	code := runMain([]string{"validate", "-c", cfg}, &out, &errb)
	if want := strings.TrimPrefix(fmt.Sprintf(want, "validate"), "syncd validate: ") + cfg + ":5: http.api_token_file: /nonexistent/tok: no such file or directory\n"; code != exitUsage || errb.String() != want {
		t.Errorf("validate: exit %d, stderr %q; want exit 2 and %q", code, errb.String(), want)
	}
}

func TestReadIDs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ids")
	os.WriteFile(p, []byte("a\n\n# c\n  b  \nbad\x01\n"), 0o644)
	if _, err := readIDFile(p, store.ValidateID); err == nil || !strings.Contains(err.Error(), ":5:") {
		t.Errorf("readIDFile: %v, want an error at line 5", err)
	}
	os.WriteFile(p, []byte("a\n\n# c\n  b  \n"), 0o644)
	if ids, err := readIDFile(p, store.ValidateID); err != nil || strings.Join(ids, ",") != "a,b" {
		t.Errorf("readIDFile = %v, %v", ids, err)
	}
}

func TestShownEscapes(t *testing.T) {
	tests := []struct{ in, want string }{
		{"customer-1", "customer-1"},
		{"a b", "a b"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"line\nbreak\ttab", `line\nbreak\ttab`},
		{"\ufeffcustomer-1", `\ufeffcustomer-1`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"kund-ö", "kund-ö"},
		{strings.Repeat("x", 70), strings.Repeat("x", 64) + "...(70 bytes)"},
	}
	for _, tt := range tests {
		if got := shown(tt.in, 64); got != tt.want {
			t.Errorf("shown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestReadIDsStripsByteOrderMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "items.txt")
	os.WriteFile(path, []byte("\ufeffcustomer-1\ncustomer-2\n"), 0o644)
	ids, err := readIDFile(path, store.ValidateID)
	if err != nil || len(ids) != 2 || ids[0] != "customer-1" {
		t.Fatalf("readIDFile = %q, %v; want [customer-1 customer-2]", ids, err)
	}
}

// Errors reach an operator without the package names that start their
// wrapped parts, nor the command's own name after one; a quoted value
// keeps what it holds, and a message that is only a name stays.
func TestCLIText(t *testing.T) {
	for _, tt := range []struct{ cmd, in, want string }{
		{"status", `store: connect to 127.0.0.1:1: dial tcp: refused`, `connect to 127.0.0.1:1: dial tcp: refused`},
		{"status", `a.yaml:2: redis.addrs: store: connect: refused`, `a.yaml:2: redis.addrs: connect: refused`},
		{"status", `ownership: lock "store: x": store: unlock: engine: sinks: boom`, `lock "store: x": unlock: boom`},
		{"status", `store`, `store`},
		{"status", `restore: failed`, `restore: failed`},
		{"status", `engine: store: 42`, `42`},
		// The library's name for the call the command made says the
		// command's name again (an outside trial).
		{"trigger", `nothing triggered: store: trigger: reason: 300 bytes long`, `nothing triggered: reason: 300 bytes long`},
		{"trigger", `store: trigger: shard 2: NOPERM no`, `shard 2: NOPERM no`},
		{"requeue", `store: requeue: NOPERM no`, `NOPERM no`},
		{"requeue", `store: unknown: NOPERM no`, `unknown: NOPERM no`},
		{"items", `store: add: NOPERM no`, `add: NOPERM no`},
		{"trigger", `trigger: reason`, `trigger: reason`},
		{"trigger", `store: trigger`, `trigger`},
		// Each line of a joined error is read on its own.
		{"trigger", "nothing triggered: store: trigger: ids: 10001 given\nstore: trigger: reason: too long", "nothing triggered: ids: 10001 given\nreason: too long"},
		{"requeue", "a: store: x\n\nstore: b\n", "a: x\n\nb"},
	} {
		if got := cliText(errors.New(tt.in), tt.cmd); got != tt.want {
			t.Errorf("cliText(%q, %q) = %q, want %q", tt.in, tt.cmd, got, tt.want)
		}
	}
	// A file named as a package keeps its name (an outside trial read
	// "syncd status: no such file or directory").
	t.Chdir(t.TempDir())
	if code, _, errb := syncd("status", "-c", "store"); code != exitUsage || errb != "syncd status: store: no such file or directory\n" {
		t.Errorf("status -c store: exit %d, stderr %q", code, errb)
	}
}

// Every line of an error names the command, as git's hints each start
// "hint: ": a grep for "syncd requeue:" finds them all. Before, the lines
// after the first of a joined error had nothing (an outside trial).
func TestPrintErrEveryLine(t *testing.T) {
	var b bytes.Buffer
	printErr(&b, "requeue", errors.Join(errors.New("nothing requeued: store: a"), errors.New("b\n\nc"), errors.New("store: requeue: d")))
	want := "syncd requeue: nothing requeued: a\nsyncd requeue: b\nsyncd requeue:\nsyncd requeue: c\nsyncd requeue: d\n"
	if got := b.String(); got != want {
		t.Errorf("printErr wrote\n%s\nwant\n%s", got, want)
	}
}

// Help and usage errors say what the commands take (an outside trial):
// items list -h listed -file, which it refuses; the top-level usage gave
// status only --json and --limit; status --watch 5s did not say to write
// --watch=5s.
func TestUsageWording(t *testing.T) {
	if code, _, errb := syncd("items", "list", "-h"); code != exitOK || strings.Contains(errb, "-file") || !strings.Contains(errb, "-config") {
		t.Errorf("items list -h: exit %d, %q; want its flags without -file", code, errb)
	}
	if code, _, errb := syncd("items", "add", "-h"); code != exitOK || !strings.Contains(errb, "-file") {
		t.Errorf("items add -h: exit %d, %q; want -file", code, errb)
	}
	if code, _, errb := syncd("items", "list", "-c", "x.yaml", "--file", "ids"); code != exitUsage || !strings.Contains(errb, "flag provided but not defined: -file") {
		t.Errorf("items list --file: exit %d, %q", code, errb)
	}
	_, out, _ := syncd("help")
	if want := "syncd status   -c config.yaml [--json] [--watch[=2s]] [--state S] [--prefix P] [--limit N] [--cursor C]"; !strings.Contains(out, want) {
		t.Errorf("usage lacks %q:\n%s", want, out)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-c", "x.yaml", "--watch", "5s"}, `syncd status: unexpected argument "5s": give --watch its interval with =, as --watch=5s` + "\n"},
		{[]string{"status", "--watch", "-c", "x.yaml", "5s"}, `syncd status: unexpected argument "5s": status takes no arguments (syncd status -h lists its flags)` + "\n"},
		{[]string{"status", "-c", "x.yaml", "--watch", "soon"}, `syncd status: unexpected argument "soon": status takes no arguments (syncd status -h lists its flags)` + "\n"},
	} {
		if code, _, errb := syncd(tt.args...); code != exitUsage || errb != tt.want {
			t.Errorf("syncd %q: exit %d, stderr %q; want exit %d, %q", tt.args, code, errb, exitUsage, tt.want)
		}
	}
}
