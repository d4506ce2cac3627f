package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/syncd/syncd/store"
)

// cmdTrigger makes items due now, ahead of items that have waited less
// than store.TriggerBoostDefault (see store.Trigger), with a reason.
func cmdTrigger(args []string, stdout, stderr io.Writer) error {
	f := newFlags("trigger", stderr)
	reason := f.fs.String("reason", "", "why, recorded with the trigger (at most 256 bytes)")
	add := f.fs.Bool("add", false, "add IDs that are not in the item set instead of failing on them")
	ids, err := idArgs(f, args, "trigger", "triggered")
	if err != nil {
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
	printTriggered(stdout, res, len(ids))
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
	fmt.Fprintf(w, "%d of %d items triggered\n", res.Triggered(), n)
	if len(res.InFlight) > 0 {
		fmt.Fprintf(w, "in flight, synced again right after: %s\n", idList(res.InFlight))
	}
	if len(res.Added) > 0 {
		fmt.Fprintf(w, "added: %s\n", idList(res.Added))
	}
}

// triggerTrouble names the IDs a trigger did nothing with, nil when there
// are none. addHint is how the caller asks for unknown IDs to be added.
func triggerTrouble(res store.TriggerResult, addHint string) error {
	var errs []error
	if n := len(res.Unknown); n > 0 {
		errs = append(errs, fmt.Errorf("%d unknown ids (not in the item set; %s adds them): %s", n, addHint, idList(res.Unknown)))
	}
	if n := len(res.Quarantined); n > 0 {
		errs = append(errs, fmt.Errorf("%d quarantined ids not triggered (syncd requeue brings them back): %s", n, idList(res.Quarantined)))
	}
	return errors.Join(errs...)
}

// idList shows ids for a message, each escaped and cut (see shown).
func idList(ids []string) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = cmp.Or(shown(id, store.MaxIDLen), `""`)
	}
	return strings.Join(names, ", ")
}
