package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/syncd/syncd/store"
)

// cmdItems adds, removes or lists items.
func cmdItems(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageErr("items: say add, remove or list")
	}
	verb := args[0]
	f := newFlags("items "+verb, stderr)
	file := f.fs.String("file", "", "read IDs from this file, one per line (# comments)")
	ids, err := f.parse(args[1:])
	if err != nil {
		return err
	}
	// remove takes ids that add refuses: an item planted in Redis under
	// one (empty, control characters, 200 KB) must be removable. The
	// store still bounds their length (store.MaxRemoveIDLen).
	check := store.ValidateID
	if verb == "remove" {
		check = nil
	}
	if *file != "" {
		more, err := readLines(*file, check)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		ids = append(ids, more...)
	}
	for _, id := range ids {
		if check != nil {
			if err := check(id); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
		}
	}
	ctx := context.Background()
	st, err := adminStore(ctx, f)
	if err != nil {
		return err
	}
	defer st.Close()
	warnEmbedded(st, stderr)
	switch verb {
	case "add", "remove":
		if len(ids) == 0 {
			return usageErr("items %s: no IDs given (arguments or --file)", verb)
		}
		op, what := st.Add, "added"
		if verb == "remove" {
			op, what = st.Remove, "removed"
		}
		n, err := op(ctx, ids...)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		fmt.Fprintf(stdout, "%d of %d items %s\n", n, len(ids), what)
		return nil
	case "list":
		w := bufio.NewWriter(stdout)
		defer w.Flush()
		for sh := range st.Keys().Shards() {
			for off := 0; off >= 0; {
				page, next, err := st.List(ctx, sh, off, 1000)
				if err != nil {
					return &exitError{code: exitUsage, err: err}
				}
				for _, it := range page {
					fmt.Fprintln(w, shown(it.ID, store.MaxIDLen))
				}
				off = next
			}
		}
		return nil
	}
	return usageErr("items: unknown action %q (add, remove or list)", verb)
}

func warnEmbedded(st *store.Store, w io.Writer) {
	if st.Embedded() {
		fmt.Fprintln(w, "syncd: note: no redis.addrs configured; this command works on an empty in-process store that ends with it")
	}
}

// readIDs reads one valid ID per line; blank lines and # comments are
// skipped.
func readIDs(path string) ([]string, error) { return readLines(path, store.ValidateID) }

// readLines reads one ID per line, each accepted by check (any, if nil);
// blank lines and # comments are skipped.
func readLines(path string, check func(string) error) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	// A byte order mark (editors on Windows write one) would become an
	// invisible part of the first ID: a duplicate no one can see.
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), store.MaxRemoveIDLen+2)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if check != nil {
			if err := check(line); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
		}
		ids = append(ids, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ids, nil
}

// cmdRequeue makes items due now and clears their failures.
func cmdRequeue(args []string, stdout, stderr io.Writer) error {
	f := newFlags("requeue", stderr)
	ids, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usageErr("requeue: no IDs given")
	}
	ctx := context.Background()
	st, err := adminStore(ctx, f)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.Requeue(ctx, ids...)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	fmt.Fprintf(stdout, "%d of %d items requeued\n", n, len(ids))
	if n < len(ids) {
		return &exitError{code: exitFailed, err: fmt.Errorf("%d IDs are not in the item set", len(ids)-n)}
	}
	return nil
}

// cmdRelease deletes a stuck claim and raises the item's fence.
func cmdRelease(args []string, stdout, stderr io.Writer) error {
	f := newFlags("release", stderr)
	force := f.fs.Bool("force", false, "required: delete the claim whoever holds it")
	ids, err := f.parse(args)
	if err != nil {
		return err
	}
	if !*force {
		return usageErr("release: pass --force: this takes a claim away from its owner; a fenced sink rejects that owner's late writes")
	}
	if len(ids) != 1 {
		return usageErr("release: give exactly one ID")
	}
	ctx := context.Background()
	st, err := adminStore(ctx, f)
	if err != nil {
		return err
	}
	defer st.Close()
	held, fence, err := st.ForceRelease(ctx, ids[0])
	if errors.Is(err, store.ErrUnknownItem) || errors.Is(err, store.ErrInvalidID) {
		return &exitError{code: exitUsage, err: err}
	}
	if err != nil {
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
	if _, err := f.parse(args); err != nil {
		return err
	}
	cfg, err := f.load()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			fmt.Fprintln(stderr, ee.err)
			return &exitError{code: exitUsage, err: errors.New("")}
		}
		return err
	}
	if _, err := cfg.Store(nil, nil); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if _, err := cfg.Items(nil); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	out, err := cfg.Redacted()
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	stdout.Write(out)
	return nil
}
