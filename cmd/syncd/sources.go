package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/cmd/syncd/internal/config"
	"github.com/syncd/syncd/cmd/syncd/internal/idlines"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/internal/redact"
	"github.com/syncd/syncd/ownership"
	execsink "github.com/syncd/syncd/sinks/exec"
	"github.com/syncd/syncd/store"
)

// sources returns the item set's sources of truth as the engine reads
// them: the union of items.ids, items.file (read again each time) and
// the output of items.command; and a function that reports whether
// items.file changed since it was last asked.
func sources(cfg *config.File, log zerolog.Logger) (func(context.Context) ([]string, error), func() bool) {
	argv, timeout := cfg.ItemsCommand()
	src := func(ctx context.Context) ([]string, error) {
		ids, err := cfg.Items(nil)
		if err != nil {
			return nil, err
		}
		if len(argv) == 0 {
			return ids, nil
		}
		more, err := runItemsCommand(ctx, argv, timeout)
		return append(ids, more...), err
	}
	var changed func() bool
	if path := cfg.ItemsFile(); path != "" {
		var mu sync.Mutex
		var last string
		changed = func() bool {
			fi, err := os.Stat(path)
			if err != nil {
				return false
			}
			now := fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
			mu.Lock()
			defer mu.Unlock()
			was := last
			last = now
			return was != "" && was != now
		}
		changed() // the file as it is now is what the start read
	}
	return src, changed
}

// stderrTail bounds the stderr an items.command error quotes.
const stderrTail = execsink.StderrTailDefault

// runItemsCommand runs items.command and reads one ID per line from its
// output, as items.file is read. A command that fails, times out or
// prints an invalid line is an error that quotes the end of its stderr.
func runItemsCommand(ctx context.Context, argv []string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// Not syncd's environment, which holds the Redis password: the exec
	// sink's allow-list (an empty, non-nil Env when none is set).
	cmd.Env = append([]string{}, execsink.InheritedEnv(os.Environ())...)
	var stdout bytes.Buffer
	stderr := execsink.NewTailBuffer(stderrTail)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	tail := ""
	if s := stderr.String(); s != "" {
		// Logged, and shown by `syncd items reconcile`: its secrets go.
		tail = fmt.Sprintf("; stderr: %q", redact.Tail(s, redact.NewSecrets()))
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return nil, fmt.Errorf("items.command: timed out after %v (items.command_timeout)%s", timeout, tail)
	case err != nil:
		return nil, fmt.Errorf("items.command: %w%s", err, tail)
	}
	ids, err := idlines.Parse("items.command output", &stdout, store.ValidateID)
	if err != nil {
		return ids, fmt.Errorf("%w%s", err, tail)
	}
	return ids, nil
}

// cmdReconcile reconciles the item set with its sources now, as the
// elected reconciler; with --force, past the guard against mass removal.
func cmdReconcile(args []string, stdout, stderr io.Writer) (err error) {
	f := newFlags("items reconcile", stderr)
	defer f.explain(&err)
	force := f.fs.Bool("force", false, "remove what the sources no longer hold even past items.max_removal, or when a source failed or gave nothing")
	if err := f.parseNone(args); err != nil {
		return err
	}
	cfg, err := f.loadRunner() // it runs items.command
	if err != nil {
		return err
	}
	printConfigWarnings(cfg, stderr)
	ctx := context.Background()
	log := newAdminLogger(cfg, os.Stderr)
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	warnEmbedded(st, stderr)
	src, _ := sources(cfg, log)
	ec := cfg.Engine().WithDefaults()
	res, err := engine.Reconcile(ctx, st, src, engine.ReconcileOptions{MaxRemoval: ec.Items.MaxRemoval,
		Force: *force, TTL: ec.Ownership.WithDefaults().TTL, Logger: log})
	var hold *ownership.HoldError
	switch {
	case errors.As(err, &hold):
		return &exitError{code: exitFailed, err: fmt.Errorf("%w; try again in %v", err, hold.For.Round(time.Second)+time.Second)}
	case errors.Is(err, engine.ErrNotLeader):
		return &exitError{code: exitFailed, err: fmt.Errorf("%w; try again in a moment", err)}
	}
	// A failed source's items are not among the counted: what the others
	// gave was added, and nothing removed (an outside trial read "60
	// items in the sources" above the failure as if every source spoke).
	// The error after the count says which failed, once (it was said
	// before the count as well).
	in := "in the sources"
	if res.SourceErr != nil {
		in = "in the sources that answered"
	}
	fmt.Fprintf(stdout, "%d items %s, %d were in the set: %d added, %d removed, %d kept (added by hand); %v\n",
		res.Desired, in, res.Current, res.Added, res.Removed, res.KeptManual, res.Elapsed.Round(time.Millisecond))
	switch {
	case err != nil:
		return &exitError{code: exitFailed, err: err}
	case res.Refused != nil:
		return &exitError{code: exitFailed, err: res.Refused}
	}
	return nil
}
