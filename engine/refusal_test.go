package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
	"github.com/syncd/syncd/tests/testutil"
)

// refusedStore opens, as a new ACL user of srv's allowed every command
// but the denied ones, a store over a deployment of 2 shards holding
// ids, made by the default user.
func refusedStore(t *testing.T, srv *redistest.Server, user string, deny []string, ids ...string) *store.Store {
	t.Helper()
	return refusedShards(t, srv, 2, user, deny, ids...)
}

// refusedShards is refusedStore over shards shards.
func refusedShards(t *testing.T, srv *redistest.Server, shards int, user string, deny []string, ids ...string) *store.Store {
	t.Helper()
	ctx := context.Background()
	admin := openStore(t, srv.Addr(), shards)
	if _, err := admin.Add(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	args := []any{"ACL", "SETUSER", user, "on", ">pw-" + user, "~*", "&*", "+@all"}
	for _, c := range deny {
		args = append(args, "-"+c)
	}
	if err := admin.Client().Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{Addrs: []string{srv.Addr()}, Username: user, Password: "pw-" + user,
		KeyPrefix: admin.Keys().Prefix(), Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A batch run whose claims Redis refuses (a user without zscore, which
// the batch claim script calls) ends with the refusal, where it logged
// "claim round failed" every poll and never ended; with a settle delay
// too, whose claims run in goroutines of their own.
func TestBatchEndsOnRefusal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	for _, settle := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(settle.String(), func(t *testing.T) { batchEndsOnRefusal(t, srv, settle) })
	}
}

func batchEndsOnRefusal(t *testing.T, srv *redistest.Server, settle time.Duration) {
	st := refusedStore(t, srv, "nozscore", []string{"zscore"}, "x1")
	e := newEngine(t, st, &recorder{}, engine.Config{Workers: 2, Poll: 10 * time.Millisecond,
		Ownership: ownership.Config{TTL: 5 * time.Second, Settle: settle}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := e.RunBatch(ctx, engine.BatchOptions{})
	if ctx.Err() != nil {
		t.Fatalf("the batch run did not end on the refusal: ran %v", time.Since(start).Round(time.Millisecond))
	}
	if !store.IsPermission(err) || !errors.Is(err, store.ErrPermission) || rep != nil {
		t.Fatalf("RunBatch: %v, %v; want a store.ErrPermission and no report", rep, err)
	}
	if msg := err.Error(); strings.Contains(msg, "user_script") || !strings.Contains(msg, scriptRefusal(t, srv, "zscore").words) {
		t.Errorf("RunBatch's error %q: want Redis's refusal without the script's sha and line", msg)
	}
}

// The daemon retries claims that Redis refuses (an operator may grant
// what is missing while it runs) and logs the refusal once, at error,
// with what to grant, not "claim round failed" at warn every poll; once
// it is granted, the items sync and that is logged once too.
func TestDaemonRefusalLoggedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	// ZRANGEBYSCORE is what the daemon's claim script picks due items with.
	st := refusedStore(t, srv, "nopick", []string{"zrangebyscore"}, "x1", "x2")
	logs := &testutil.Buffer{}
	rec := &recorder{}
	e, err := engine.New(st, rec, engine.Config{Workers: 2, Poll: 10 * time.Millisecond, Interval: time.Hour,
		Ownership: ownership.Config{TTL: 5 * time.Second}, Logger: zerolog.New(logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	e.Start(context.Background())
	const hint = "the commands the README's least-privilege ACL lists"
	waitFor(t, 10*time.Second, "the refusal logged", func() bool { return strings.Contains(logs.String(), hint) })
	time.Sleep(time.Second) // rounds retried at 10ms, doubling: about 7 more
	out := logs.String()
	if n := strings.Count(out, hint); n != 1 || strings.Contains(out, "claim round failed") || strings.Contains(out, "user_script") {
		t.Errorf("logged the refusal %d times (want 1), at warn as a failed round, or with the script's place:\n%s", n, out)
	}
	if r := scriptRefusal(t, srv, "zrangebyscore"); !strings.Contains(out, `"level":"error"`) || !strings.Contains(out, r.words) ||
		!strings.Contains(out, `"refused":"`+r.refused+`"`) || !strings.Contains(out, "ACL LOG") {
		t.Errorf("the refusal is not logged at error with Redis's reply, what it refused and ACL LOG:\n%s", out)
	}
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "nopick", "+zrangebyscore").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "both items synced after the grant", func() bool { return len(rec.snapshot()) >= 2 })
	waitFor(t, 5*time.Second, "the grant logged", func() bool {
		return strings.Count(logs.String(), "redis accepts the claims again") == 1
	})
}

// A permission revoked while the daemon runs, over shards the two claim
// loops take turns on, is logged once, not once per shard and backoff
// step (an outside trial saw 5 lines in 1.8 s): "refused" names the
// command, whichever shard was refused. /readyz says the claims are
// refused, not "not claiming yet". Granted, that is logged once; revoked
// again, once more.
func TestDaemonRefusalRevokedLoggedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ids := make([]string, 32)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
	}
	st := refusedShards(t, srv, 8, "revoked", nil, ids...)
	logs := &testutil.Buffer{}
	rec := &recorder{}
	e, err := engine.New(st, rec, engine.Config{Workers: 4, Poll: 10 * time.Millisecond, Interval: 20 * time.Millisecond,
		Ownership: ownership.Config{TTL: 5 * time.Second}, Logger: zerolog.New(logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	e.Start(context.Background())
	waitFor(t, 10*time.Second, "every item synced", func() bool { return len(rec.snapshot()) >= 2*len(ids) })
	admin := srv.Client(t)
	acl := func(rule string) {
		t.Helper()
		if err := admin.Do(context.Background(), "ACL", "SETUSER", "revoked", rule).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Claims refused: the lines at error naming evalsha (a release
	// refused is logged apart, with "op":"releases").
	refusals := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"level":"error"`) && strings.Contains(l, "evalsha") && !strings.Contains(l, `"op":"releases"`) {
				n++
			}
		}
		return n
	}
	readyz := func() string {
		w := httptest.NewRecorder()
		engine.Handler(e).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return strings.TrimSpace(w.Body.String())
	}
	for round := 1; round <= 2; round++ {
		acl("-evalsha")
		waitFor(t, 10*time.Second, "the refusal logged", func() bool { return refusals() >= round })
		time.Sleep(1500 * time.Millisecond) // rounds of both loops retried at 10ms, doubling
		if n := refusals(); n != round || !strings.Contains(logs.String(), `"refused":"command evalsha"`) {
			t.Fatalf("revoked %d times, the refusal logged %d times (want %d, naming command evalsha):\n%s", round, n, round, logs.String())
		}
		const want = "not ready: claims refused by Redis ACL: command evalsha; see ACL LOG"
		if got := readyz(); got != want {
			t.Errorf("/readyz while the claims are refused = %q, want %q", got, want)
		}
		acl("+evalsha")
		waitFor(t, 10*time.Second, "the grant logged", func() bool {
			return strings.Count(logs.String(), "redis accepts the claims again") == round
		})
		waitFor(t, 10*time.Second, "/readyz ready", func() bool { return readyz() == "ready" })
	}
}

// Releases that Redis's ACL refuses (a user without del, which the
// release script deletes the claims with) are logged once, at error,
// naming what was refused, not "release failed" at warn for each item
// (an outside trial); once granted, one line says how many were refused.
func TestReleaseRefusalLoggedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ids := []string{"d1", "d2", "d3", "d4", "d5", "d6"}
	st := refusedShards(t, srv, 4, "nodel", []string{"del"}, ids...)
	logs := &testutil.Buffer{}
	rec := &recorder{}
	e, err := engine.New(st, rec, engine.Config{Workers: 4, Poll: 10 * time.Millisecond, Interval: 100 * time.Millisecond,
		Ownership: ownership.Config{TTL: time.Second}, Logger: zerolog.New(logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	e.Start(context.Background())
	// Unreleased, each claim expires after its ttl and the item syncs again.
	waitFor(t, 15*time.Second, "each item synced twice", func() bool { return len(rec.snapshot()) >= 2*len(ids) })
	out := logs.String()
	refused := scriptRefusal(t, srv, "del").refused
	if n := strings.Count(out, `"op":"releases"`); n != 1 || strings.Contains(out, `"level":"warn"`) ||
		!strings.Contains(out, `"level":"error"`) || !strings.Contains(out, `"refused":"`+refused+`"`) {
		t.Errorf("%d syncs whose release was refused: logged %d times (want 1 line at error naming what was refused, none at warn):\n%s",
			len(rec.snapshot()), n, out)
	}
	// /readyz says so: it said "ready" while nothing was recorded (a
	// second outside trial).
	if code, text := engine.Readiness(e.ReadyState()); code != http.StatusServiceUnavailable ||
		text != "not ready: releases refused by Redis ACL: "+refused+"; syncs are not recorded; see ACL LOG" {
		t.Errorf("readiness while releases are refused: %d %q", code, text)
	}
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "nodel", "+del").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the grant logged", func() bool { return strings.Contains(logs.String(), "redis accepts the releases again") })
	if code, text := engine.Readiness(e.ReadyState()); code != http.StatusOK {
		t.Errorf("readiness once releases go through: %d %q", code, text)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "redis accepts the releases again") && !regexp.MustCompile(`"refusals":([6-9]|\d\d)`).MatchString(l) {
			t.Errorf("the grant's line does not count the %d or more refusals: %s", len(ids), l)
		}
	}
}

// The reconciles and the backlog reads that Redis's ACL refuses are
// logged once per cause as well, each naming what was refused: a
// refused reconcile logged "reconcile failed" at error at each retry,
// and a refused backlog read named nothing.
func TestReconcileAndBacklogRefusalsLoggedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	st := refusedShards(t, srv, 2, "noreconcile", nil, "b1", "b2")
	logs := &testutil.Buffer{}
	e, err := engine.New(st, &recorder{}, engine.Config{Workers: 2, Poll: 10 * time.Millisecond, Interval: time.Hour,
		Ownership: ownership.Config{TTL: 5 * time.Second}, Logger: zerolog.New(logs).Level(zerolog.InfoLevel),
		Items: engine.ItemsConfig{Source: func(context.Context) ([]string, error) { return []string{"b1", "b2"}, nil },
			Refresh: time.Hour, Changed: func() bool { return true }}}) // a round every 2s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	// The reconcile lock is a script (evalsha); the backlog read counts
	// the due items (zcount).
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "noreconcile", "-evalsha", "-zcount").Err(); err != nil {
		t.Fatal(err)
	}
	e.Start(context.Background())
	waitFor(t, 20*time.Second, "3 reconciles refused", func() bool { return e.Metrics().ReconcileFailed.Load() >= 3 })
	lines := strings.Split(logs.String(), "\n")
	count := func(subs ...string) int {
		n := 0
		for _, l := range lines {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(l, s)
			}
			if all {
				n++
			}
		}
		return n
	}
	for _, want := range [][]string{
		{`"op":"reconciles"`, `"refused":"command evalsha"`},
		{`"op":"backlog reads"`, `"refused":"command zcount"`},
	} {
		if n := count(want...); n != 1 {
			t.Errorf("lines with %q: %d, want 1:\n%s", want, n, logs.String())
		}
	}
	if n := count("reconcile failed") + count("cannot read the backlog"); n > 0 {
		t.Errorf("%d lines of failed reconciles or backlog reads, besides the refusals':\n%s", n, logs.String())
	}
}

// refusal is how a server words its refusal of a command a script calls
// without the grant (words), and what store.PermissionError.Refused makes
// of it.
type refusal struct{ words, refused string }

// scriptRefusal returns srv's refusal of cmd called from a script: Redis
// 7.0 names no command there, 7.2 and later do.
func scriptRefusal(t *testing.T, srv *redistest.Server, cmd string) refusal {
	if srv.NamesScriptCommand(t) {
		return refusal{"has no permissions to run the '" + cmd + "' command", "command " + cmd}
	}
	return refusal{"can't run this command", "a command a script calls"}
}
