package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/store"
)

// cmdTrigger makes items due now, ahead of items that have waited less
// than store.TriggerBoostDefault (see store.Trigger), with a reason.
func cmdTrigger(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("trigger", stderr)
	defer f.explain(&err)
	reason := f.fs.String("reason", "", "why, recorded with the trigger (at most 256 bytes)")
	add := f.fs.Bool("add", false, "add IDs that are not in the item set instead of failing on them")
	ids, err := idArgs(f, args, "triggered")
	if err != nil {
		// A bad --reason is named with the bad IDs, so that one run says
		// all that is wrong (an outside trial saw it only after fixing
		// the IDs).
		var ee *exitError
		if rerr := (store.TriggerParams{Reason: *reason}).Validate(); rerr != nil && errors.As(err, &ee) && ee.err != nil {
			return usageErr("%w\n%w", ee.err, rerr)
		}
		return err
	}
	p := store.TriggerParams{IDs: ids, Reason: *reason, Add: *add}
	if err := p.Validate(); err != nil {
		return usageErr("nothing triggered: %w", err)
	}
	ctx := context.Background()
	st, err := adminStoreWarn(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.Trigger(ctx, p)
	if err == nil || res.Triggered() > 0 || len(res.Added) > 0 {
		// A call that failed part way says what it did; one refused
		// whole (an ACL refusal) printed "0 of 1 item triggered".
		printTriggered(stdout, res, len(ids))
	}
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if err := triggerTrouble(res, "--add"); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	return nil
}

// printTriggered says what a trigger of n IDs did.
func printTriggered(w io.Writer, res store.TriggerResult, n int) {
	fmt.Fprintf(w, "%d of %s triggered\n", res.Triggered(), count(n, "item"))
	if len(res.InFlight) > 0 {
		fmt.Fprintf(w, "in flight, synced again right after: %s\n", idList(res.InFlight))
	}
	if len(res.Added) > 0 {
		fmt.Fprintf(w, "added: %s\n", idList(res.Added))
	}
}

// triggerTrouble is api.TriggerTrouble.
func triggerTrouble(res store.TriggerResult, addHint string) error {
	return api.TriggerTrouble(res, addHint)
}

// idList is api.IDList.
func idList(ids []string) string { return api.IDList(ids) }
