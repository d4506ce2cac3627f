package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// TriggerBoostDefault is the head start a trigger gives an item when
// TriggerParams.Boost is zero: a second, four of the engine's default
// polls. An item whose wait is below it stays behind the triggered one.
const TriggerBoostDefault = time.Second

// MaxTriggerBoost bounds TriggerParams.Boost: the longest an item that
// waits can be held back by a flood of triggers.
const MaxTriggerBoost = time.Minute

// MaxTriggerReason bounds TriggerParams.Reason, in bytes.
const MaxTriggerReason = 256

// MaxTriggerIDs bounds the IDs of one Trigger call.
const MaxTriggerIDs = 10000

// TriggerParams are the parameters of Store.Trigger.
type TriggerParams struct {
	// IDs are the items to trigger, each valid (ValidateID); a repeated
	// one counts once. At most MaxTriggerIDs.
	IDs []string
	// Reason is recorded with the trigger: valid UTF-8 without control
	// characters, at most MaxTriggerReason bytes; may be empty.
	Reason string
	// Boost is the head start over items that are due: the item becomes
	// due Boost before now. Default TriggerBoostDefault; at most
	// MaxTriggerBoost.
	Boost time.Duration
	// Add adds an ID that is not in the item set (triggered, due at once)
	// instead of reporting it unknown, and marks it added by hand, as
	// AddByHand does: a reconcile keeps it until it is removed by hand.
	Add bool
}

// Validate reports every bad field at once.
func (p TriggerParams) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("store: trigger: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(p.IDs) > MaxTriggerIDs {
		bad("ids", "%d given, the limit is %d", len(p.IDs), MaxTriggerIDs)
	}
	for _, id := range p.IDs {
		if err := ValidateID(id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := checkReason(p.Reason); err != "" {
		bad("reason", "%s", err)
	}
	if p.Boost < 0 || p.Boost > MaxTriggerBoost {
		bad("boost", "%v is outside 0 to %v", p.Boost, MaxTriggerBoost)
	}
	return errors.Join(errs...)
}

// checkReason says what is wrong with a reason, "" if nothing.
func checkReason(r string) string {
	switch {
	case len(r) > MaxTriggerReason:
		return fmt.Sprintf("%d bytes long, the limit is %d", len(r), MaxTriggerReason)
	case !utf8.ValidString(r):
		return "not valid UTF-8"
	}
	for i, c := range r {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			return fmt.Sprintf("control or format character %U at byte %d", c, i)
		}
	}
	return ""
}

// TriggerResult says what a trigger did with each ID, in the order given.
type TriggerResult struct {
	Due         []string // now due, ahead of items that waited less than the boost
	InFlight    []string // being synced: due again as soon as it is released, once
	Added       []string // were not in the item set; added, due (TriggerParams.Add)
	Unknown     []string // not in the item set: nothing done
	Quarantined []string // quarantined: nothing done; Requeue brings them back
}

// Triggered is how many items the trigger will sync: due, in flight and
// added.
func (r TriggerResult) Triggered() int { return len(r.Due) + len(r.InFlight) + len(r.Added) }

// Trigger makes items due now, ahead of the longest-waiting order by a
// bounded boost, and records when and why in the shard's trig hash (see
// LastTrigger).
//
// The rule: a triggered item's due score becomes min(score, now - Boost).
// Claims take the lowest scores first, so the item goes ahead of every
// due item that has waited less than Boost and stays behind every item
// that has waited longer. A flood of triggers cannot starve anyone: each
// triggered item's score is at least its trigger time - Boost, so an item
// due at d is passed only by items triggered before d + Boost, which are
// finite, and each is synced once and then due again an interval later.
// An item that has already waited longer than Boost keeps its place.
//
// An item in flight (its owner/state record exists) keeps its score, its
// lease's expiry, so that it still comes back if its owner dies; instead
// it is flagged in the shard's again hash, and its release, of whatever
// kind, clears the flag: a synced or handed-back item is then due at
// release time - Boost, a failed one keeps its backoff (the retry is the
// sync after the trigger), a quarantined one stays quarantined. So it is
// synced once more right after, however many triggers came meanwhile.
// If the owner dies instead, the flag waits for the next release.
//
// A quarantined item is left as it is and reported (Requeue clears its
// failures and brings it back): a trigger must not undo a quarantine
// that max_attempts decided. An ID not in the item set is reported
// unknown, or added when p.Add is set.
//
// A shard whose keys are damaged costs its own IDs: the others are
// triggered and the error, a *DamageError for that shard, is returned
// with the result.
func (s *Store) Trigger(ctx context.Context, p TriggerParams) (TriggerResult, error) {
	if err := p.Validate(); err != nil {
		return TriggerResult{}, err
	}
	boost := p.Boost
	if boost == 0 {
		boost = TriggerBoostDefault
	}
	add := "0"
	if p.Add {
		add = "1"
	}
	codes := make(map[string]int64, len(p.IDs))
	byShard := map[int][]string{}
	for _, id := range p.IDs {
		if _, dup := codes[id]; !dup {
			codes[id] = 0
			sh := s.keys.Shard(id)
			byShard[sh] = append(byShard[sh], id)
		}
	}
	var errs []error
	for sh, ids := range byShard {
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), 1000)]
			ids = ids[len(chunk):]
			keys := make([]string, 0, 4+len(chunk))
			keys = append(keys, s.keys.Due(sh), s.keys.Triggers(sh), s.keys.Again(sh), s.keys.Manual(sh))
			args := make([]any, 0, 3+len(chunk))
			args = append(args, boost.Milliseconds(), p.Reason, add)
			for _, id := range chunk {
				keys = append(keys, s.keys.Record(sh, id))
				args = append(args, id)
			}
			v, err := s.runScript(ctx, s.rdb, scriptTrigger, keys, args...)
			if err == nil {
				var r []int64
				if r, err = ints(v, len(chunk)); err == nil {
					for i, id := range chunk {
						codes[id] = r[i]
					}
					continue
				}
			}
			errs = append(errs, fmt.Errorf("store: trigger: %w", s.shardErr(ctx, sh, err)))
			// This chunk and the rest of the shard are not reported: the
			// error names the shard.
			for _, rest := range [][]string{chunk, ids} {
				for _, id := range rest {
					delete(codes, id)
				}
			}
			break
		}
	}
	var res TriggerResult
	for _, id := range p.IDs {
		code, ok := codes[id]
		if !ok {
			continue // its shard failed, or a repeat
		}
		delete(codes, id)
		switch code {
		case 1:
			res.Due = append(res.Due, id)
		case 2:
			res.InFlight = append(res.InFlight, id)
		case 3:
			res.Added = append(res.Added, id)
		case -1:
			res.Quarantined = append(res.Quarantined, id)
		default:
			res.Unknown = append(res.Unknown, id)
		}
	}
	return res, errors.Join(errs...)
}

// TriggerNote is the record of an item's last trigger.
type TriggerNote struct {
	At     time.Time // Redis's time of the trigger
	Reason string
}

// LastTrigger returns the record of the last trigger of id, and false
// when there is none (or it is not one Trigger wrote).
func (s *Store) LastTrigger(ctx context.Context, id string) (TriggerNote, bool, error) {
	if err := ValidateID(id); err != nil {
		return TriggerNote{}, false, err
	}
	sh := s.keys.Shard(id)
	v, err := s.rdb.HGet(ctx, s.keys.Triggers(sh), id).Result()
	if errors.Is(err, redis.Nil) {
		return TriggerNote{}, false, nil
	}
	if err != nil {
		return TriggerNote{}, false, fmt.Errorf("store: last trigger %q: %w", id, s.shardErr(ctx, sh, err))
	}
	return parseTriggerNote(v)
}

// parseTriggerNote reads "<ms> <reason>" as trigger.lua writes it. What
// comes back from Redis is input too: a value Trigger did not write
// (another format, a reason too long or with control characters) is no
// note.
func parseTriggerNote(v string) (TriggerNote, bool, error) {
	ms, reason, ok := strings.Cut(v, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n <= 0 || n > MaxDue || checkReason(reason) != "" {
		return TriggerNote{}, false, nil
	}
	return TriggerNote{At: time.UnixMilli(n), Reason: reason}, true, nil
}
