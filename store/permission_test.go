package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/redistest"
)

// IsPermission tells Redis's ACL refusals, both a command's NOPERM and
// Redis 7.0's refusal of a script's command, from other errors, and
// Permission makes one an ErrPermission without the script's sha and
// line, which nobody can act on.
func TestPermission(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "noget", "on", ">pw", "~*", "&*", "+@all", "-get").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "onlyk", "on", ">pw", "~k*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	admin.LPush(ctx, "list", "v")
	u := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "noget", Password: "pw"})
	defer u.Close()
	direct := u.Get(ctx, "k").Err()
	inScript := u.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"k"}).Err()
	wrongType := u.Eval(ctx, "return redis.call('LPUSH', KEYS[1], 'v')", []string{"list"}).Err() // allowed
	other := admin.Get(ctx, "list").Err()                                                        // WRONGTYPE
	k := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "onlyk", Password: "pw"})
	defer k.Close()
	key := k.Set(ctx, "other", "v", 0).Err()
	keyInScript := k.Eval(ctx, "return redis.call('SET', 'other', 'v')", nil).Err()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"NOPERM", direct, true},
		{"in a script", inScript, true},
		{"a key", key, true},
		{"a key in a script", keyInScript, true},
		{"wrapped", errors.Join(errors.New("store: claim shard 2"), inScript), true},
		{"allowed", wrongType, false},
		{"WRONGTYPE", other, false},
		{"nil", nil, false},
	} {
		if got := store.IsPermission(tt.err); got != tt.want {
			t.Errorf("%s: IsPermission(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
		p := store.Permission(tt.err)
		if got := errors.Is(p, store.ErrPermission); got != tt.want {
			t.Errorf("%s: errors.Is(Permission(%v), ErrPermission) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
		if !tt.want && p != tt.err {
			t.Errorf("%s: Permission changed %v to %v", tt.name, tt.err, p)
		}
	}
	if !strings.Contains(inScript.Error(), "@user_script:") {
		t.Fatalf("Redis's in-script refusal %q no longer names the script's place: the case below tests nothing", inScript)
	}
	// Redis 7.0's wording, or 7.2's and later's (TestPermissionRedis72).
	wantCmd := "ERR The user executing the script can't run this command or subcommand (a command its script calls: Redis's ACL LOG names it)"
	wantKey := "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments (a key a command of its script names: Redis's ACL LOG names it)"
	if redis72(inScript) {
		wantCmd = "ERR ACL failure in script: User noget has no permissions to run the 'get' command"
		wantKey = "ERR ACL failure in script: No permissions to access a key"
	}
	if got := store.Permission(inScript).Error(); got != wantCmd {
		t.Errorf("Permission(%q) reads %q, want %q", inScript, got, wantCmd)
	}
	if got := store.Permission(keyInScript).Error(); got != wantKey {
		t.Errorf("Permission(%q) reads %q, want %q", keyInScript, got, wantKey)
	}
	if got, want := store.Permission(direct).Error(), direct.Error(); got != want {
		t.Errorf("Permission(%q) reads %q, want it unchanged", direct, got)
	}
}

// Refused names what Redis refused alike for every shard a call went
// to (the engine logs one line per Refused: it logged one per shard).
func TestPermissionRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "refused", "on", ">pw", "~k*", "&*", "+@all", "-get", "-script|load").Err(); err != nil {
		t.Fatal(err)
	}
	u := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "refused", Password: "pw"})
	defer u.Close()
	inScript := u.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"k"}).Err()
	wantInScript := "a command a script calls"
	if redis72(inScript) {
		wantInScript = "command get" // 7.2 names it
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"command", u.Get(ctx, "k").Err(), "command get"},
		{"subcommand", u.ScriptLoad(ctx, "return 1").Err(), "command script|load"},
		{"command in a script", inScript, wantInScript},
		{"key", u.Set(ctx, "other", "v", 0).Err(), "a key"},
		{"key in a script", u.Eval(ctx, "return redis.call('SET', 'other', 'v')", nil).Err(), "a key a script names"},
	} {
		if !store.IsPermission(tt.err) {
			t.Fatalf("%s: %v is no refusal", tt.name, tt.err)
		}
		for shard := range 2 {
			var pe *store.PermissionError
			if !errors.As(store.Permission(fmt.Errorf("store: claim shard %d: %w", shard, tt.err)), &pe) {
				t.Fatalf("%s: Permission made no *PermissionError", tt.name)
			}
			if got := pe.Refused(); got != tt.want {
				t.Errorf("%s: Refused() of %q = %q, want %q", tt.name, pe, got, tt.want)
			}
		}
	}
}

// A release that Redis refuses part-way (an ACL without DEL) records
// nothing: the DEL goes before the outcome. Before, the synced item's
// lastSync and due time and the failed item's attempt and error were
// written, then DEL was refused with the claims still held, and a retry
// counted the failure a second time.
func TestReleaseRefusedRecordsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, nil)
	ctx := t.Context()
	admin := srv.Client(t)
	setUser := func(args ...any) {
		t.Helper()
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "rel"}, args...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setUser("on", ">pw", "~*", "&*", "+@all")
	s := open(t, store.Config{Addrs: []string{srv.Addr()}, Username: "rel", Password: "pw", Shards: 1})
	if _, err := s.Add(ctx, "ok", "bad"); err != nil {
		t.Fatal(err)
	}
	rec := record("h")
	claims := claim(t, s, rec, time.Minute, "ok", "bad")
	for _, c := range claims {
		if c.Code != store.ClaimOK {
			t.Fatalf("claim = %+v", c)
		}
	}
	before := map[string]store.ItemDetail{}
	for _, id := range []string{"ok", "bad"} {
		d, err := s.Item(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = d
	}
	reqs := []store.ReleaseRequest{
		{ID: "ok", Token: rec.Token, Kind: store.ReleaseSynced, Delay: time.Hour},
		{ID: "bad", Token: rec.Token, Kind: store.ReleaseFailed, Delay: time.Hour, Error: "boom"},
	}
	setUser("-del")
	if _, err := s.Release(ctx, 0, reqs); !store.IsPermission(err) {
		t.Fatalf("Release without DEL: %v, want a refusal", err)
	}
	for _, id := range []string{"ok", "bad"} {
		d, err := s.Item(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b := before[id]
		if d.Due != b.Due || d.Attempts != b.Attempts || !d.LastSync.Equal(b.LastSync) || len(d.Errors) != len(b.Errors) || d.LeaseLeft == 0 {
			t.Errorf("%s after a refused release: due %d, attempts %d, lastSync %v, %d errors, lease %v; before: due %d, attempts %d, lastSync %v, %d errors",
				id, d.Due, d.Attempts, d.LastSync, len(d.Errors), d.LeaseLeft, b.Due, b.Attempts, b.LastSync, len(b.Errors))
		}
	}
	setUser("+del")
	res, err := s.Release(ctx, 0, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Code != store.Released {
			t.Errorf("%s: retried release = %+v, want released", reqs[i].ID, r)
		}
	}
	d, err := s.Item(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if d.Attempts != 1 || len(d.Errors) != 1 {
		t.Errorf("the failed item after a refused release and its retry: %d attempts, %d errors logged, want 1 and 1", d.Attempts, len(d.Errors))
	}
}

// redis72 tells a refusal inside a script in the wording of Redis 7.2
// and later from 7.0's.
func redis72(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ACL failure in script: ")
}

// serverError is an error reply of Redis's, as go-redis returns one.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// Redis 7.2 and later, and Valkey, word a script's refusals as "ACL
// failure in script: " and a command's NOPERM text (redis's script.c and
// acl.c getAclErrorMessage; Debian 12's Redis is 7.0, so the replies
// are written out, as Redis 8.0.2 gave them). IsPermission missed them:
// a revoked grant then read as a failed call, retried, and /readyz never
// named it.
func TestPermissionRedis72(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, reply, text, refused string
	}{
		{"command", "ERR ACL failure in script: User syncd has no permissions to run the 'del' command script: 0123456789abcdef0123456789abcdef01234567, on @user_script:142.",
			"ERR ACL failure in script: User syncd has no permissions to run the 'del' command", "command del"},
		{"key", "ERR ACL failure in script: No permissions to access a key script: 0123456789abcdef0123456789abcdef01234567, on @user_script:9.",
			"ERR ACL failure in script: No permissions to access a key", "a key a script names"},
		{"valkey", "ERR ACL failure in script: User syncd has no permissions to run the 'zadd' command",
			"ERR ACL failure in script: User syncd has no permissions to run the 'zadd' command", "command zadd"},
	} {
		err := fmt.Errorf("store: release shard 3: %w", serverError(tt.reply))
		if !store.IsPermission(err) {
			t.Errorf("%s: IsPermission(%q) = false", tt.name, tt.reply)
			continue
		}
		var pe *store.PermissionError
		if !errors.As(store.Permission(err), &pe) {
			t.Fatalf("%s: Permission made no *PermissionError", tt.name)
		}
		if got, want := pe.Error(), "store: release shard 3: "+tt.text; got != want {
			t.Errorf("%s: Error() = %q, want %q", tt.name, got, want)
		}
		if got := pe.Refused(); got != tt.refused {
			t.Errorf("%s: Refused() = %q, want %q", tt.name, got, tt.refused)
		}
	}
	if other := fmt.Errorf("store: claim: %w", serverError("ERR Error running script (call to f_x): @user_script:1: ERR failure in something")); store.IsPermission(other) {
		t.Errorf("IsPermission(%v) = true", other)
	}
}
