package engine

import (
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/store"
)

// refusals tracks Redis's ACL refusals of the claims (store.IsPermission:
// the user syncd logs in as lacks a command or key a claim script
// needs). Retrying cannot fix one until an operator grants what is
// missing, so a batch run ends on the first (RunBatch returns it), and
// the daemon, which an operator may fix live, retries, logging each
// distinct refusal once at error with what to do (at debug after), and
// once more when claims go through again; a claim round failed every
// poll at warn before.
type refusals struct {
	log zerolog.Logger
	any atomic.Bool // a refusal was logged: cleared has work to do

	mu    sync.Mutex
	last  string // the refusal logged last; "" when claims go through
	ended error  // the refusal that ended a batch run
}

// refusalHint is what an operator does about a refusal.
const refusalHint = "redis refused a command to the user syncd logs in as (ACL): grant it the commands the README's least-privilege ACL lists, on the keys under the key prefix"

// seen handles err, a refusal: with end (a batch run) it keeps it as the
// refusal that ends the run, else logs it once per distinct text.
func (r *refusals) seen(err error, end bool) {
	err = store.Permission(err) // without the script's sha and line
	r.mu.Lock()
	defer r.mu.Unlock()
	if end {
		if r.ended == nil {
			r.ended = err
			r.log.Error().Err(err).Msg(refusalHint + "; the batch run ends")
		}
		return
	}
	if text := err.Error(); text != r.last {
		r.last = text
		r.any.Store(true)
		r.log.Error().Err(err).Msg(refusalHint + "; claims wait, retried until it is granted")
		return
	}
	r.log.Debug().Err(err).Msg("claim refused again (ACL)")
}

// cleared records that a claim went through; logged once after a
// refusal. Every claim calls it: without a refusal, it takes no lock.
func (r *refusals) cleared() {
	if !r.any.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != "" {
		r.last = ""
		r.any.Store(false)
		r.log.Info().Msg("redis accepts the claims again: the missing permission was granted")
	}
}

// end returns the refusal that ended a batch run, nil if none did.
func (r *refusals) end() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}
