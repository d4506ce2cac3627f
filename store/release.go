package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// ReleaseKind says what a release records.
type ReleaseKind string

// Release kinds.
const (
	ReleaseSynced     ReleaseKind = "ok"         // lastSync = now; due again after Delay
	ReleaseFailed     ReleaseKind = "fail"       // attempts + 1; due again after Delay
	ReleaseQuarantine ReleaseKind = "quarantine" // attempts + 1; not claimed until requeued
	ReleaseHandBack   ReleaseKind = "handback"   // nothing recorded; due at DueAt
)

// ReleaseRequest releases one claim.
type ReleaseRequest struct {
	ID    string
	Token Token
	Kind  ReleaseKind
	// Delay is how long until the item is due again (synced, failed).
	Delay time.Duration
	// DueAt is the due time for a hand-back, ms on Redis's clock; 0 = now,
	// or now + Delay when Delay is set.
	DueAt int64
	// Error is kept as the item's last error (failed, quarantine).
	Error string
}

// ReleaseCode is the outcome of releasing a claim or a lock.
type ReleaseCode int8

// Release outcomes.
const (
	HeldByOther ReleaseCode = -1 // someone else's claim: nothing was changed
	NotHeld     ReleaseCode = 0  // no claim: it expired or was released
	Released    ReleaseCode = 1
)

func (c ReleaseCode) String() string {
	switch c {
	case HeldByOther:
		return "held by another owner"
	case NotHeld:
		return "not held"
	case Released:
		return "released"
	}
	return "release(" + strconv.Itoa(int(c)) + ")"
}

// ReleaseResult is the outcome for one request.
type ReleaseResult struct {
	Code ReleaseCode
	// At is Redis's time of the release; for a synced item, its lastSync.
	At time.Time
}

// receiptKeep is how long a release's receipt (Keys.ReleaseReceipt) is
// kept, for a call re-sent after a dropped connection: a minute, longer
// than go-redis's retries can take (3, each bounded by the dial, write
// and read timeouts, 5+3+3 s by default). One short string per call that
// released anything: about 100 bytes each, 12 MB at 2,000 calls/s.
const receiptKeep = time.Minute

// Release compare-and-deletes claims of one shard and records their
// outcome, in one script call. A call that go-redis re-sent after a
// dropped connection replies what its first send replied (release.lua),
// found by its first request's token and id: a caller releases a claim
// once.
func (s *Store) Release(ctx context.Context, shard int, reqs []ReleaseRequest) ([]ReleaseResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	k := s.keys
	keys := make([]string, 5+len(reqs))
	copy(keys, []string{k.Due(shard), k.Meta(shard), k.Errors(shard), k.Again(shard), k.ReleaseReceipt(shard, reqs[0].Token, reqs[0].ID)})
	args := make([]any, 0, 1+5*len(reqs))
	args = append(args, receiptKeep.Milliseconds())
	for i, r := range reqs {
		keys[5+i] = k.Record(shard, r.ID)
		msg := clipError(r.Error)
		val := r.Delay.Milliseconds()
		if r.Kind == ReleaseHandBack {
			val = r.DueAt
			if val <= 0 {
				val = -r.Delay.Milliseconds()
			}
		}
		args = append(args, r.ID, string(r.Token[:]), string(r.Kind), val, msg)
	}
	reply, err := s.runHot(ctx, scriptRelease, keys, args...)
	if err != nil {
		return nil, Permission(fmt.Errorf("store: release shard %d: %w", shard, err))
	}
	v, err := ints(reply, 2*len(reqs))
	if err != nil {
		return nil, err
	}
	out := make([]ReleaseResult, len(reqs))
	for i := range reqs {
		out[i] = ReleaseResult{Code: ReleaseCode(v[2*i]), At: fromMs(v[2*i+1])}
	}
	return out, nil
}

// maxErrorText is the longest last error Release records, in bytes.
const maxErrorText = 1024

// clipError is msg cut to maxErrorText bytes, keeping its start, which
// says what failed, and its end, where a command's stderr ends (the
// error of the exec sink quotes the end of it): a second outside trial
// saw status and the API lose a failed command's last lines, as only
// the first 1024 bytes were kept. Cuts fall between runes.
func clipError(msg string) string {
	if len(msg) <= maxErrorText {
		return msg
	}
	const mark = " … "
	head := 256
	for head > 0 && !utf8.RuneStart(msg[head]) {
		head--
	}
	tail := len(msg) - (maxErrorText - 256 - len(mark))
	for tail < len(msg) && !utf8.RuneStart(msg[tail]) {
		tail++
	}
	return msg[:head] + mark + msg[tail:]
}
