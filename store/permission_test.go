package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	admin.LPush(ctx, "list", "v")
	u := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "noget", Password: "pw"})
	defer u.Close()
	direct := u.Get(ctx, "k").Err()
	inScript := u.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"k"}).Err()
	wrongType := u.Eval(ctx, "return redis.call('LPUSH', KEYS[1], 'v')", []string{"list"}).Err() // allowed
	other := admin.Get(ctx, "list").Err()                                                        // WRONGTYPE
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"NOPERM", direct, true},
		{"in a script", inScript, true},
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
	got := store.Permission(inScript).Error()
	if want := "ERR The user executing the script can't run this command or subcommand (a command its script calls: Redis's ACL LOG names it)"; got != want {
		t.Errorf("Permission(%q) reads %q, want %q", inScript, got, want)
	}
	if got, want := store.Permission(direct).Error(), direct.Error(); got != want {
		t.Errorf("Permission(%q) reads %q, want it unchanged", direct, got)
	}
}
