package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrDamaged marks an error confined to one shard: a key of the shard
// holds something syncd did not write there (a key of another type, put
// there by hand or by another program). Every other shard works; the
// error is a *DamageError that names the shard.
var ErrDamaged = errors.New("store: shard damaged")

// DamageError reports a shard whose keys are damaged.
type DamageError struct {
	Shard int
	// Problem names the damaged key and what is wrong with it, when a
	// look at the shard's keys found it ("" when it did not).
	Problem string
	Err     error // Redis's reply
	// ErrorsLost: only the shard's err HASH is damaged. Its items are
	// claimed, synced, counted and listed as any other; what is lost is
	// their last error texts (and, in Counts, BackingOff), until the key
	// is deleted. The scripts read such a key as empty and never fail on
	// it, so no claim or release reports it: Counts and ListPage do.
	ErrorsLost bool
}

func (e *DamageError) Error() string {
	if e.ErrorsLost {
		return fmt.Sprintf("store: shard %d: %s: its items sync and are listed, but their last errors are lost until the key is deleted (%s)",
			e.Shard, e.Problem, reply(e.Err))
	}
	if e.Problem != "" {
		return fmt.Sprintf("store: shard %d damaged: %s (%s)", e.Shard, e.Problem, reply(e.Err))
	}
	return fmt.Sprintf("store: shard %d damaged: %s", e.Shard, reply(e.Err))
}

// wrongType is Redis's WRONGTYPE reply without what a script adds to it:
// Redis's "script: <sha>, on @user_script:101." or the embedded store's
// "ERR Error compiling script ...: 101: ... stack traceback ...", which
// an operator cannot use (an outside trial read them in /readyz).
const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// reply is Redis's reply err as a DamageError shows it.
func reply(err error) string {
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		return wrongType
	}
	return fmt.Sprint(err)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

func (e *DamageError) Unwrap() error { return e.Err }

// Damages returns the errors joined in err, one *DamageError per shard,
// when it wraps ErrDamaged (Counts, ListPage), nil when err is nil or
// anything else (then it is the call's own failure).
func Damages(err error) []error {
	if err == nil || !errors.Is(err, ErrDamaged) {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// isDamageReply reports whether err is Redis's reply that a command met
// a key of the wrong type: WRONGTYPE, directly or from inside a script
// (the embedded store reports a script's error as "ERR Error compiling
// script ...: <line>: WRONGTYPE ..."). Nothing else counts: connection
// errors and the replies that say the server is busy, read-only,
// loading, out of memory, moving slots or missing scripts (OOM,
// READONLY, LOADING, BUSY, MOVED, ASK, CLUSTERDOWN, NOSCRIPT, ...) are
// about the server, not about one shard's keys. The scripts raise no
// error of their own on damaged values: they quarantine the item or
// rewrite the value instead.
func isDamageReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGTYPE ") || strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, ": WRONGTYPE ")
}

// shardErr turns err, Redis's reply to a call on shard's keys, into a
// *DamageError when it says the shard's keys are damaged; any other
// error is returned as it is. It then looks at the shard's keys (one
// round trip, only when damage was found) to name the damaged one.
func (s *Store) shardErr(ctx context.Context, shard int, err error) error {
	if !isDamageReply(err) {
		return err
	}
	return &DamageError{Shard: shard, Problem: s.diagnose(ctx, shard), Err: err}
}

// dueDamage is the damage a read of shard's due index found: a call
// that reads only that key needs no diagnose round trip to name it.
func (s *Store) dueDamage(shard int, err error) *DamageError {
	return &DamageError{Shard: shard, Problem: s.keys.Due(shard) + " is not a sorted set", Err: err}
}

// errorsLost is the damage of shard's err HASH (see
// DamageError.ErrorsLost), err being Redis's reply to a read of it. A
// look at the keys (one round trip) says what the key is.
func (s *Store) errorsLost(ctx context.Context, shard int, err error) *DamageError {
	p := s.diagnose(ctx, shard)
	if !strings.HasPrefix(p, s.keys.Errors(shard)+" ") {
		p = s.keys.Errors(shard) + " is not a hash"
	}
	return &DamageError{Shard: shard, Problem: p, Err: err, ErrorsLost: true}
}

// diagnose names the first key of shard whose type is not the one syncd
// writes, "" if none is (or Redis could not say).
func (s *Store) diagnose(ctx context.Context, shard int) string {
	k := s.keys
	want := []struct{ key, typ string }{
		{k.Due(shard), "zset"}, {k.Meta(shard), "hash"}, {k.Errors(shard), "hash"}, {k.Epoch(shard), "string"},
	}
	cmds := make([]*redis.StatusCmd, len(want))
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, w := range want {
			cmds[i] = p.Type(ctx, w.key)
		}
		return nil
	})
	for i, w := range want {
		if t := cmds[i].Val(); t != "" && t != "none" && t != w.typ {
			return fmt.Sprintf("%s is a %s, want a %s", w.key, t, w.typ)
		}
	}
	return ""
}

// NoDue is the due time of a shard that has nothing to claim (empty, or
// only quarantined items). It cannot be mistaken for a due time: those
// are clamped to ±MaxDue.
const NoDue int64 = math.MaxInt64

// MaxDue bounds the due times the store returns, in ms either side of
// the epoch (2^53: about 285,000 years). A score outside, planted by
// hand (-inf, 1e300), reads as ±MaxDue, in Go and in the scripts, whose
// replies Redis turns into integers by a cast that would overflow; a
// planted -inf or 0 is the longest-waiting item there is, not "none".
const MaxDue int64 = 1 << 53

// dueOf is a due score as a due time: clamped to ±MaxDue, NoDue for a
// quarantined item (+inf).
func dueOf(score float64) int64 {
	switch {
	case math.IsInf(score, 1):
		return NoDue
	case score >= float64(MaxDue):
		return MaxDue
	case score <= -float64(MaxDue):
		return -MaxDue
	}
	return int64(score)
}

// isDamage reports whether err is a *DamageError.
func isDamage(err error) bool {
	var d *DamageError
	return errors.As(err, &d)
}
