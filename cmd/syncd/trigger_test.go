package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

// redisZ is id due at Redis's now + offset.
func redisZ(t *testing.T, st *store.Store, offset time.Duration, id string) redis.Z {
	t.Helper()
	now, err := st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return redis.Z{Score: float64(now + offset.Milliseconds()), Member: id}
}

// redisInf is id quarantined.
func redisInf(id string) redis.Z { return redis.Z{Score: math.Inf(1), Member: id} }

// syncd trigger: known IDs are due now and the reason is kept; unknown
// ones are named (exit 1) unless --add adds them; quarantined ones are
// named and left; bad input changes nothing (exit 2).
func TestTriggerCommand(t *testing.T) {
	cfg, st := adminConfig(t, "trig")
	ctx := context.Background()
	st.Add(ctx, "a", "b", "q")
	st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard("a")), redisZ(t, st, time.Hour, "a"))
	st.Client().ZAdd(ctx, st.Keys().Due(st.Keys().Shard("q")), redisInf("q"))

	code, out, errb := syncd("trigger", "-c", cfg, "--reason", "ticket 42", "a", "nope", "q", "a", "nope2")
	if code != exitFailed || out != "1 of 4 items triggered\n" {
		t.Errorf("exit %d, stdout %q; want %d and 1 of 4", code, out, exitFailed)
	}
	want := "syncd trigger: 2 unknown ids (not in the item set; --add adds them): nope, nope2\n" +
		"syncd trigger: 1 quarantined id not triggered (syncd requeue brings it back): q\n"
	if diff := cmp.Diff(errb, want); diff != "" {
		t.Errorf("stderr (-got +want):\n%s", diff)
	}
	if d := testutil.DueIn(t, st, "a"); d > 0 {
		t.Errorf("a due in %v after the trigger", d)
	}
	if note, ok, err := st.LastTrigger(ctx, "a"); !ok || err != nil || note.Reason != "ticket 42" {
		t.Errorf("LastTrigger(a) = %+v, %v, %v", note, ok, err)
	}

	code, out, errb = syncd("trigger", "-c", cfg, "--add", "nope", "b")
	if code != exitOK || out != "2 of 2 items triggered\nadded: nope\n" || errb != "" {
		t.Errorf("--add: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	code, out, errb = syncd("trigger", "-c", cfg, "b")
	if code != exitOK || out != "1 of 1 item triggered\n" || errb != "" {
		t.Errorf("one id: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	if in := itemSet(t, st, "nope", "nope2"); !cmp.Equal(in, []string{"nope"}) {
		t.Errorf("in the item set: %q", in)
	}

	// Each says what is wrong once: the reason's said "nothing
	// triggered: trigger: reason:" (an outside trial).
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"x", "bad\x01"}, `syncd trigger: nothing triggered: invalid item id "bad\x01": control character U+0001 at byte 3` + "\n"},
		{[]string{"x", "--reason", "line\nbreak"}, "syncd trigger: nothing triggered: reason: control or format character U+000A at byte 4\n"},
		{[]string{"x", "--reason", strings.Repeat("r", 300)}, "syncd trigger: nothing triggered: reason: 300 bytes long, the limit is 256\n"},
		// A bad ID and a bad reason, both in one run: the reason went
		// unsaid until the IDs were fixed.
		{[]string{"bad\x01", "--reason", "a\x07b"}, `syncd trigger: nothing triggered: invalid item id "bad\x01": control character U+0001 at byte 3` + "\n" +
			"syncd trigger: reason: control or format character U+0007 at byte 1\n"},
	} {
		code, out, errb := syncd(append([]string{"trigger", "-c", cfg, "--add"}, tt.args...)...)
		if code != exitUsage || out != "" || errb != tt.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q", tt.args, code, out, errb, exitUsage, tt.want)
		}
	}
	if in := itemSet(t, st, "x"); in != nil {
		t.Errorf("a refused trigger added %q", in)
	}
	if code, _, errb := syncd("trigger", "-c", cfg); code != exitUsage || errb != "syncd trigger: no IDs given\n" {
		t.Errorf("no IDs: exit %d, %q", code, errb)
	}
}

// requeue and items add and remove without IDs say so once: they said
// "syncd requeue: requeue: no IDs given" (an outside trial).
func TestNoIDsSaidOnce(t *testing.T) {
	cfg, _ := adminConfig(t, "noids")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"requeue"}, "syncd requeue: no IDs given (arguments, --file or --state)\n"},
		{[]string{"items", "add"}, "syncd items: no IDs given (arguments or --file)\n"},
		{[]string{"items", "remove"}, "syncd items: no IDs given (arguments or --file)\n"},
		{[]string{"release", "--force"}, "syncd release: no ID given: release takes exactly one\n"},
	} {
		if code, out, errb := syncd(append(tt.args, "-c", cfg)...); code != exitUsage || out != "" || errb != tt.want {
			t.Errorf("syncd %q: exit %d, stdout %q, stderr %q; want %d, %q", tt.args, code, out, errb, exitUsage, tt.want)
		}
	}
}
