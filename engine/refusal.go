package engine

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/store"
)

// refusals tracks Redis's ACL refusals (store.IsPermission: the user
// syncd logs in as lacks a command or key a call needs), by operation:
// the claims, the releases, the backlog reads, the reconciles. Retrying
// cannot fix one until an operator grants what is missing, so a batch
// run ends on the first refused claim (RunBatch returns it). The daemon,
// which an operator may fix live, retries, and logs each cause once at
// error with what to do: a cause is what store.PermissionError.Refused
// names ("command evalsha"), the same for every shard, item and retry.
// It logs once more, with how many calls were refused, when the
// operation goes through again.
//
// The causes were the errors' texts, which name the shard, and only the
// last one was kept: the daemon's two claim loops, refused on two
// shards, took turns logging (an outside trial saw 5 lines in 1.8 s).
//
// A call that goes through clears its operation's refusals when its
// shard was refused, or a call across shards was (shard wholeCall):
// where the ACL refuses the keys of some shards only, the calls of the
// others would clear and log the refusal again every round. And only
// when it started after the last refusal was seen: a call sent before
// the revocation, and answered after a refused one, logged the refusal
// cleared and then again (a test saw it under load).
type refusals struct {
	log zerolog.Logger
	any atomic.Int32 // operations refused: cleared has work to do

	mu    sync.Mutex
	ops   map[op]*refused
	ended error // the refusal that ended a batch run
}

// refused is one operation's refusals since it last went through.
type refused struct {
	causes []string     // in the order first seen
	shards map[int]bool // the shards refused; wholeCall: a call across shards
	n      int          // calls refused
	last   time.Time    // when the last refusal was seen
}

// op is an operation whose refusals are logged apart.
type op struct {
	name   string // what goes through again: "the claims"
	effect string // what a refusal costs, logged with it
}

var (
	opClaim     = op{"claims", "claims wait, retried until it is granted"}
	opRelease   = op{"releases", "syncs are not recorded: each item syncs again once its claim expires"}
	opBacklog   = op{"backlog reads", "the due and oldest-wait gauges are stale until it is granted"}
	opReconcile = op{"reconciles", "the item set is not reconciled with its sources until it is granted"}
)

// wholeCall is the shard of a call across shards.
const wholeCall = -1

// refusalHint is what an operator does about a refusal.
const refusalHint = "grant the user syncd logs in as the commands the README's least-privilege ACL lists, on the keys under the key prefix; redis's ACL LOG names each refusal"

// Log field keys of a refusal.
const (
	keyOp       = "op"
	keyRefused  = "refused"
	keyHint     = "hint"
	keyRefusals = "refusals"
)

// cause returns what Redis refused in err (store.PermissionError.Refused)
// and err without the script's sha and line.
func cause(err error) (string, error) {
	err = store.Permission(err)
	var pe *store.PermissionError
	if errors.As(err, &pe) {
		return pe.Refused(), err
	}
	return err.Error(), err
}

// endRun keeps err, a refusal of a batch run's claims, as the refusal
// that ends the run, logged once.
func (r *refusals) endRun(err error) {
	c, err := cause(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended == nil {
		r.ended = err
		r.log.Error().Str(keyOp, opClaim.name).Str(keyRefused, c).Err(err).Str(keyHint, refusalHint).
			Msg("redis refused syncd's user (ACL): the batch run ends")
	}
}

// seen records err, a refusal of a call of o to shard (wholeCall: across
// shards), and logs it when its cause is new for o; it reports whether
// it logged.
func (r *refusals) seen(o op, shard int, err error) bool {
	c, err := cause(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ops == nil {
		r.ops = map[op]*refused{}
	}
	f := r.ops[o]
	if f == nil {
		f = &refused{shards: map[int]bool{}}
		r.ops[o] = f
		r.any.Add(1)
	}
	f.n++
	f.shards[shard] = true
	f.last = time.Now()
	if slices.Contains(f.causes, c) {
		r.log.Debug().Str(keyOp, o.name).Str(keyRefused, c).Err(err).Msg("refused again (ACL)")
		return false
	}
	f.causes = append(f.causes, c)
	r.log.Error().Str(keyOp, o.name).Str(keyRefused, c).Err(err).Str(keyHint, refusalHint).
		Msg("redis refused syncd's user (ACL): " + o.effect)
	return true
}

// cleared records that a call of o to shard, started at started, went
// through; see refusals for when that clears o's refusals, logged once.
// Every claim and release calls it: without a refusal, it takes no lock.
func (r *refusals) cleared(o op, shard int, started time.Time) {
	if r.any.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.ops[o]
	if f == nil || !(shard == wholeCall || f.shards[shard] || f.shards[wholeCall]) || !started.After(f.last) {
		return
	}
	delete(r.ops, o)
	r.any.Add(-1)
	r.log.Info().Str(keyOp, o.name).Strs(keyRefused, f.causes).Int(keyRefusals, f.n).
		Msg("redis accepts the " + o.name + " again: the missing permission was granted")
}

// causes returns what Redis refuses o, nil while o goes through.
func (r *refusals) causes(o op) []string {
	if r.any.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.ops[o]; f != nil {
		return slices.Clone(f.causes)
	}
	return nil
}

// end returns the refusal that ended a batch run, nil if none did.
func (r *refusals) end() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}
