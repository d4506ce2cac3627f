package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/syncd/syncd/cmd/syncd/internal/config"
	"github.com/syncd/syncd/cmd/syncd/internal/idlines"
	"github.com/syncd/syncd/store"
)

// stdin is what `--file -` reads; tests replace it.
var stdin io.Reader = os.Stdin

// cmdItems adds, removes or lists items.
func cmdItems(args []string, stdout, stderr io.Writer) (err error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageErr("say add, remove, list or reconcile")
	}
	verb := args[0]
	if verb == "reconcile" {
		return cmdReconcile(args[1:], stdout, stderr)
	}
	what, ok := map[string]string{"add": "added", "remove": "removed", "list": ""}[verb]
	if !ok {
		return usageErr("unknown action %q (add, remove, list or reconcile)", verb)
	}
	f := newFlags("items "+verb, stderr)
	defer f.explain(&err)
	var file *string // items list reads no IDs, and its -h shows no --file
	if verb != "list" {
		file = f.fs.String("file", "", "read IDs from this file, one per line (# comments); - reads standard input")
	}
	var shard shardFlag
	if verb == "remove" {
		f.fs.Var(&shard, "shard", "remove the IDs from shard `N`, whatever shard they are of: an item planted in another shard than its ID's, which claims quarantine")
	}
	ids, err := f.parse(args[1:])
	if err != nil {
		return err
	}
	if verb == "list" && len(ids) > 0 {
		return f.unexpected(ids, "no arguments")
	}
	if verb != "list" {
		if ids, err = itemIDs(verb, what, ids, *file); err != nil {
			return err
		}
	}
	ctx := context.Background()
	open := adminStoreWarn
	if verb == "list" {
		open = adminReadStore // writes nothing
	}
	st, err := open(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	switch verb {
	case "add":
		n, err := st.AddByHand(ctx, ids...)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if n == len(ids) {
			fmt.Fprintf(stdout, "%d of %s added\n", n, count(len(ids), "item"))
			return nil
		}
		// The others were in the set already: they are marked added by
		// hand all the same (add_manual.lua), which an operator could
		// not tell from "0 of 1 item added".
		fmt.Fprintf(stdout, "%d of %s added; %d already in the set, now also marked added by hand (a reconcile keeps them until items remove)\n",
			n, count(len(ids), "item"), len(ids)-n)
		return nil
	case "remove":
		if sh, ok := shard.get(); ok {
			return changeKnown(ctx, st, func(ctx context.Context, ids ...string) (int, error) {
				return st.RemoveInShard(ctx, sh, ids...)
			}, func(ctx context.Context, ids ...string) ([]string, error) {
				return st.UnknownInShard(ctx, sh, ids...)
			}, ids, fmt.Sprintf("removed from shard %d", sh), fmt.Sprintf("not in shard %d", sh), stdout)
		}
		return changeKnown(ctx, st, st.Remove, st.Unknown, ids, what, "not in the item set", stdout)
	}
	return listItems(ctx, st, stdout)
}

// itemIDs returns the IDs of items add or remove: the arguments, then
// the lines of file ("-" is standard input), each once. When any is bad
// it returns every bad one and no ID, so that nothing is changed. remove
// takes ids that add refuses: an item planted in Redis under one (empty,
// control characters, 200 KB) must be removable.
func itemIDs(verb, what string, args []string, file string) ([]string, error) {
	check := store.ValidateID
	if verb == "remove" {
		check = removable
	}
	ids, err := checkIDs(args, check, what)
	if err != nil {
		return nil, err
	}
	if file != "" {
		more, err := readIDFile(file, check)
		var bad *idlines.Error
		if errors.As(err, &bad) {
			line := "lines"
			if bad.Count() == 1 {
				line = "line"
			}
			return nil, usageErr("nothing %s: %s has %d invalid %s:\n%w", what, bad.Name, bad.Count(), line, err)
		}
		if err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		ids = unique(append(ids, more...))
	}
	if len(ids) == 0 {
		return nil, usageErr("no IDs given (arguments or --file)")
	}
	return ids, nil
}

// checkIDs returns ids each once, or an error naming every one check
// refuses ("nothing requeued: invalid item id ...").
func checkIDs(ids []string, check func(string) error, what string) ([]string, error) {
	var errs []error
	for _, id := range ids {
		if err := check(id); err != nil {
			errs = append(errs, errors.New(idlines.Reason(err)))
		}
	}
	if len(errs) > 0 {
		return nil, usageErr("nothing %s: %w", what, errors.Join(errs...))
	}
	return unique(ids), nil
}

// unique returns ids with each kept once, at its first place.
func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	return slices.DeleteFunc(ids, func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
}

// removable is the check of items remove: any id store.Remove takes.
func removable(id string) error {
	if len(id) > store.MaxRemoveIDLen {
		return &store.IDError{ID: id[:64] + "...", Reason: fmt.Sprintf("%d bytes long, the limit for removal is %d", len(id), store.MaxRemoveIDLen)}
	}
	return nil
}

// shardFlag is items remove's --shard: a shard number, 0 or more, or
// not given. An int flag's default of -1 read as unset, so --shard -1
// removed the item from its own shard (an outside trial), and -h showed
// "(default -1)", a value the command refuses.
type shardFlag struct {
	n   int
	set bool
}

func (f *shardFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *shardFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return errors.New("a shard is a number, 0 or more")
	}
	f.n, f.set = n, true
	return nil
}

func (f *shardFlag) get() (int, bool) { return f.n, f.set }

// readIDFile reads the IDs of path ("-" is standard input, named "stdin"
// in errors) by the rules of package idlines, each accepted by check.
func readIDFile(path string, check func(string) error) ([]string, error) {
	if path == "-" {
		return idlines.Parse("stdin", stdin, check)
	}
	// Each problem with the file reads "--file <path>: why", once: a
	// directory read "/tmp: read /tmp: is a directory" (an outside
	// trial).
	fh, err := os.Open(path)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("--file %s: %w", path, pe.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("--file %s: %w", path, err)
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("--file %s: is a directory", path)
	}
	return idlines.Parse(path, fh, check)
}

// changeKnown runs op (st.Requeue, st.Remove, st.RemoveInShard) over
// ids and says how many it changed. The ids lookup finds missing (where:
// not in the item set, not in shard N) fail the command with exitFailed,
// each named; the known ones are changed all the same.
func changeKnown(ctx context.Context, st *store.Store, op func(context.Context, ...string) (int, error),
	lookup func(context.Context, ...string) ([]string, error), ids []string, what, where string, stdout io.Writer) error {
	unknown, err := lookup(ctx, ids...)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	n, err := op(ctx, ids...)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	fmt.Fprintf(stdout, "%d of %s %s\n", n, count(len(ids), "item"), what)
	if len(unknown) == 0 {
		return nil
	}
	names := make([]string, len(unknown))
	for i, id := range unknown {
		names[i] = cmp.Or(shown(id, store.MaxIDLen), `""`)
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%s (%s): %s", count(len(unknown), "unknown id"), where, strings.Join(names, ", "))}
}

// listItems prints every item's ID, one per line, shard by shard. A
// damaged shard's items are left out, and the command then fails naming
// each such shard after printing the others (one bad key used to stop
// the listing at its shard).
func listItems(ctx context.Context, st *store.Store, stdout io.Writer) error {
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var damaged []error
	for sh := range st.Keys().Shards() {
		for off := 0; off >= 0; {
			page, next, err := st.List(ctx, sh, off, 1000)
			if errors.Is(err, store.ErrDamaged) {
				damaged = append(damaged, err)
				break
			}
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			for _, it := range page {
				fmt.Fprintln(w, shown(it.ID, store.MaxIDLen))
			}
			off = next
		}
	}
	if damaged != nil {
		w.Flush()
		return &exitError{code: exitFailed, err: fmt.Errorf("items of %s not listed: %w", count(len(damaged), "damaged shard"), errors.Join(damaged...))}
	}
	return nil
}

func warnEmbedded(st *store.Store, w io.Writer) {
	if st.Embedded() {
		fmt.Fprintln(w, "syncd: note: no redis.addrs configured; this command works on an empty in-process store that ends with it")
	}
}

// idArgs parses a command's flags and returns its ID arguments, at least
// one, every one valid (else every bad one, and nothing is changed).
func idArgs(f *flags, args []string, what string) ([]string, error) {
	ids, err := f.parse(args)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, usageErr("no IDs given")
	}
	return checkIDs(ids, store.ValidateID, what)
}

// cmdRequeue makes items due now and clears their failures: the IDs
// given, those of --file, and with --state every item in that state
// (quarantined or backing_off), found as status --state finds them.
func cmdRequeue(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("requeue", stderr)
	defer f.explain(&err)
	file := f.fs.String("file", "", "also requeue the IDs in this file, one per line (# comments); - reads standard input")
	state := f.fs.String("state", "", "also requeue every item in this state: quarantined or backing_off (after a target outage, say)")
	ids, err := f.parse(args)
	if err != nil {
		return err
	}
	if *state != "" && *state != store.ItemQuarantined && *state != store.ItemBackingOff {
		return usageErr("--state %q: requeue takes %s or %s", *state, store.ItemQuarantined, store.ItemBackingOff)
	}
	if *state == "" && len(ids) == 0 && *file == "" {
		return usageErr("no IDs given (arguments, --file or --state)")
	}
	if len(ids) > 0 || *file != "" {
		if ids, err = itemIDs("requeue", "requeued", ids, *file); err != nil {
			return err
		}
	}
	ctx := context.Background()
	st, err := adminStore(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	var damaged error
	if *state != "" {
		var more []string
		more, damaged = idsInState(ctx, st, *state)
		if more == nil && damaged != nil && !errors.Is(damaged, store.ErrDamaged) {
			return &exitError{code: exitUsage, err: damaged}
		}
		if len(ids)+len(more) == 0 {
			fmt.Fprintf(stdout, "no item %s\n", strings.ReplaceAll(*state, "_", " "))
			return damagedErr(damaged)
		}
		ids = unique(append(ids, more...))
	}
	err = changeKnown(ctx, st, st.Requeue, st.Unknown, ids, "requeued", "not in the item set", stdout)
	return cmp.Or(err, damagedErr(damaged))
}

// idsInState returns the IDs of every item in state, paging through
// store.ListPage as status --state does. A damaged shard's items are
// left out, and its error returned with the others' IDs.
func idsInState(ctx context.Context, st *store.Store, state string) ([]string, error) {
	var ids []string
	var damaged []error
	q := store.ListQuery{State: state, Limit: store.ListLimitMax}
	for {
		page, err := st.ListPage(ctx, q)
		switch {
		case errors.Is(err, store.ErrDamaged):
			damaged = append(damaged, err)
		case err != nil:
			return nil, err
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		if page.Next == "" {
			return ids, errors.Join(damaged...)
		}
		q.Cursor = page.Next
	}
}

// damagedErr fails a command whose damaged shards were left out (exit 1).
func damagedErr(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("damaged shards left out: %w", err)}
}

// cmdRelease deletes a stuck claim and raises the item's fence.
func cmdRelease(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("release", stderr)
	defer f.explain(&err)
	force := f.fs.Bool("force", false, "required: delete the claim whoever holds it")
	ids, err := f.parse(args)
	if err != nil {
		return err
	}
	if !*force {
		return usageErr("pass --force: this takes a claim away from its owner; a fenced sink rejects that owner's late writes")
	}
	switch {
	case len(ids) == 0:
		return usageErr("no ID given: release takes exactly one")
	case len(ids) > 1:
		return f.unexpected(ids[1:], "exactly one ID")
	}
	ctx := context.Background()
	st, err := adminStore(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	held, fence, err := st.ForceRelease(ctx, ids[0])
	if errors.Is(err, store.ErrInvalidID) || store.IsPermission(err) {
		// An ACL refusal is the configuration's, as the other admin
		// commands and a refused login say (exit 2).
		return &exitError{code: exitUsage, err: err}
	}
	if err != nil {
		// An unknown ID too, as requeue, items remove and trigger say
		// theirs (exit 1): it exited 2, a usage error (an outside
		// trial).
		return &exitError{code: exitFailed, err: err}
	}
	if held {
		fmt.Fprintf(stdout, "%s: claim deleted; fence raised to %d; due now\n", ids[0], fence)
	} else {
		fmt.Fprintf(stdout, "%s: was not claimed; fence raised to %d; due now\n", ids[0], fence)
	}
	return nil
}

// cmdValidate prints the effective configuration, or every error.
func cmdValidate(args []string, stdout, stderr io.Writer) error {
	f := newFlags("validate", stderr)
	if err := f.parseNone(args); err != nil {
		return err
	}
	// A file with problems still gives what loaded, so that the checks
	// below report theirs in the same run (an outside trial: a user fixing
	// a config met the token file missing only after fixing a typo).
	cfg, loadErr := config.LoadPartial(f.config)
	var errs []error
	if loadErr != nil {
		errs = append(errs, loadErr)
	}
	if cfg != nil {
		// What run would log as a warning: said, and not refused.
		for _, w := range cfg.Warnings() {
			fmt.Fprintln(stderr, "warning:", w)
		}
		errs = append(errs, offlineChecks(cfg)...)
	}
	errs = byLine(errs)
	if len(errs) > 0 {
		// One problem a line, each naming its file, line and field.
		fmt.Fprintln(stderr, errors.Join(errs...))
		return &exitError{code: exitUsage, err: errors.New("")}
	}
	out, err := cfg.Redacted()
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	stdout.Write(out)
	return nil
}

// byLine is errs with each *config.Errors taken apart, in the file's
// line order (stable; one about the whole file first, one that names no
// line of it last): the file's own checks and the offline ones each ran
// in their own order, and validate printed lines 4, 13, 6, 9, then the
// second lot from line 3 again (outside trials).
func byLine(errs []error) []error {
	var flat []error
	for _, err := range errs {
		if ce, ok := err.(*config.Errors); ok {
			for _, fe := range ce.List {
				flat = append(flat, fe)
			}
			continue
		}
		flat = append(flat, err)
	}
	line := func(err error) int {
		if fe := (*config.FieldError)(nil); errors.As(err, &fe) {
			return fe.Line // 0, first: the file's own (its mode, say)
		}
		return math.MaxInt
	}
	slices.SortStableFunc(flat, func(a, b error) int { return cmp.Compare(line(a), line(b)) })
	return flat
}

// offlineChecks are what the file's own checks cannot see, each reported
// (a user fixes them in one round, not one per run of validate): the
// secrets, items.file, items.command's program, the sink, the programs
// others could replace (config.File.ProgramErrors) and the API token,
// read as run reads them, so that validate refuses what run would. On a
// File with problems (config.LoadPartial), what reads a field with one
// is skipped.
func offlineChecks(cfg *config.File) []error {
	var errs []error
	if _, err := cfg.Store(nil, nil); err != nil {
		errs = append(errs, err)
	}
	if _, err := cfg.Items(nil); err != nil {
		errs = append(errs, err)
	}
	// items.command's program must be there: run would only find out at
	// its first reconcile, and log it.
	if argv, _ := cfg.ItemsCommand(); len(argv) > 0 && !cfg.Failed("items.command") {
		if _, err := exec.LookPath(argv[0]); err != nil {
			errs = append(errs, cfg.At("items.command", err))
		}
	}
	if err := cfg.CheckSink(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, cfg.ProgramErrors()...)
	if _, err := cfg.APIToken(nil, nil); err != nil {
		errs = append(errs, err)
	}
	return errs
}
