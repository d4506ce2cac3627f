package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
	"github.com/syncd/syncd/cmd/syncd/internal/config"
	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// flags are the flags every command shares.
type flags struct {
	fs     *flag.FlagSet
	config string
	cfg    *config.File // once loaded, for explain
}

func newFlags(name string, stderr io.Writer) *flags {
	f := &flags{fs: flag.NewFlagSet("syncd "+name, flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	f.fs.StringVar(&f.config, "c", "config.yaml", "configuration file")
	f.fs.StringVar(&f.config, "config", "config.yaml", "configuration file")
	return f
}

// parse parses args, allowing flags after positional arguments (syncd
// items add a b --file f), and returns the positional ones.
func (f *flags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &exitError{code: exitOK}
			}
			return nil, &exitError{code: exitUsage}
		}
		args = f.fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseNone parses args for a command that takes flags only, and
// refuses any other argument, naming it: one ignored could be a mistyped
// flag or IDs meant for another command (an outside trial: status -c
// config.yaml a b ran as if a and b were not there).
func (f *flags) parseNone(args []string) error {
	rest, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return f.unexpected(rest, "no arguments")
	}
	return nil
}

// unexpected is the usage error for the arguments rest, which the
// command, which takes what, did not expect.
func (f *flags) unexpected(rest []string, what string) error {
	quoted := make([]string, len(rest))
	for i, a := range rest {
		quoted[i] = strconv.Quote(a)
	}
	noun := "argument"
	if len(rest) > 1 {
		noun = "arguments"
	}
	cmd := strings.TrimPrefix(f.fs.Name(), "syncd ")
	hint := ""
	f.fs.VisitAll(func(*flag.Flag) { hint = fmt.Sprintf(" (syncd %s -h lists its flags)", cmd) })
	return usageErr("unexpected %s %s: %s takes %s%s", noun, strings.Join(quoted, ", "), cmd, what, hint)
}

func (f *flags) load() (*config.File, error) {
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	f.cfg = cfg
	return cfg, nil
}

// loadRunner is load for run, batch and items reconcile, which run the
// configured programs: one that users other than its owner could replace
// (config.File.ProgramErrors) is refused before anything starts.
func (f *flags) loadRunner() (*config.File, error) {
	cfg, err := f.load()
	if err != nil {
		return nil, err
	}
	if errs := cfg.ProgramErrors(); len(errs) > 0 {
		return nil, &exitError{code: exitUsage, err: errors.Join(errs...)}
	}
	return cfg, nil
}

// checkSink refuses, as validate does (config.File.CheckSink), a sink
// that run or batch could not build, before either writes to Redis: a
// sink.file.path naming a directory was refused only after the
// deployment was created and the items seeded (an outside trial).
func checkSink(cfg *config.File) error {
	if err := cfg.CheckSink(); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	return nil
}

// logConfigWarnings logs what the configuration runs with but should not
// (config.File.Warnings), with its key, line, path and the fix as fields:
// a secret file any user can read (and its mode), a secret or trust file
// owned by another user (and their uid).
func logConfigWarnings(cfg *config.File, log zerolog.Logger) {
	for _, w := range cfg.Warnings() {
		ev := log.Warn().Str("config", w.File).Int("line", w.Line).Str("key", w.Field)
		var (
			me *config.ModeError
			oe *config.OwnerError
		)
		switch {
		case errors.As(w, &me):
			ev.Str("path", me.Path).Str("mode", fmt.Sprintf("%04o", uint32(me.Mode))).Str("secret", me.Secret).
				Str("fix", me.Fix()).Msg("secret file readable by any user on the host")
		case errors.As(w, &oe):
			ev.Str("path", oe.Path).Int("owner_uid", oe.Owner).Int("uid", oe.User).Str("secret", oe.Secret).
				Str("fix", oe.Fix()).Msg("file owned by another user, who could replace it")
		default:
			ev.Msg(w.Msg)
		}
	}
}

// stopOnSignal returns a context that ends at the first SIGTERM or
// SIGINT, which it logs with msg; a second one exits at once (claims then
// expire after their ttl). stop undoes it.
func stopOnSignal(log zerolog.Logger, msg string) (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		var s os.Signal
		select {
		case s = <-sigs:
		case <-done:
			return
		}
		log.Info().Str("signal", s.String()).Msg(msg)
		cancel()
		select {
		case s = <-sigs:
		case <-done:
			return
		}
		log.Warn().Str("signal", s.String()).Msg("second signal: exiting at once; claims expire after their ttl")
		os.Exit(exitFailed)
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// openStore opens the configured store once, creating the deployment
// when Redis holds none, for a process that claims or writes; errors
// are exit code 2.
func openStore(ctx context.Context, cfg *config.File, log zerolog.Logger) (*store.Store, error) {
	st, err := dialStore(ctx, cfg, log, false)
	if err != nil {
		return nil, err
	}
	if st.Fresh() {
		// This process created the deployment: start its one ttl of
		// waiting now, as the first claim would, so that a daemon started
		// more than a ttl after a command that created it (items add)
		// claims at once, instead of finding no marker, waiting a ttl and
		// warning of a data loss (an operator's trial). Safe: a lease from
		// before a data loss that made Redis look new ends within a ttl of
		// now. On failure the first claim marks it.
		ttl := cfg.Ownership().WithDefaults().TTL
		for sh := range st.Keys().Shards() {
			if _, err := st.MarkEpoch(ctx, sh, ttl); err != nil {
				log.Debug().Err(err).Int("shard", sh).Msg("mark the new deployment's epoch; the first claim will")
				break
			}
		}
	}
	return st, nil
}

// openReadStore opens the configured store once for a process that only
// reads (status, items list, a read-only ui): it writes nothing to Redis
// (store.Config.NoCreate), so that it cannot make a deployment, nor the
// marker after a data loss that the daemons go by (status then showed
// the loss at 1970). Store.Deployed says whether there is one. The
// embedded store is this process's own, and is created as by openStore.
func openReadStore(ctx context.Context, cfg *config.File, log zerolog.Logger) (*store.Store, error) {
	return dialStore(ctx, cfg, log, true)
}

// dialStore opens the configured store, writing nothing when readOnly;
// errors are exit code 2, named at the key to fix when one is.
func dialStore(ctx context.Context, cfg *config.File, log zerolog.Logger, readOnly bool) (*store.Store, error) {
	sc, err := cfg.Store(nil, nil)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	sc.Logger = log
	sc.NoCreate = readOnly && !sc.Embedded()
	st, err := store.Open(ctx, sc)
	if err != nil {
		switch {
		case store.IsUnavailable(err) && len(sc.Addrs) > 0:
			// Redis did not answer where the file says it is.
			err = cfg.At("redis.addrs", err)
		case errors.Is(err, store.ErrShardsMismatch):
			// Unset, the count is the default, and the error points at
			// redis: (where the key goes): say so, or "configured 16"
			// names a setting the file does not hold.
			dflt := ""
			if !cfg.IsSet("redis.shards") {
				dflt = fmt.Sprintf("%d is the default: redis.shards is not set; ", store.ShardsDefault)
			}
			err = cfg.At("redis.shards", fmt.Errorf("%w (%sa deployment keeps its shard count: set redis.shards to its count, or use another redis.key_prefix for a new one)", err, dflt))
		}
		return nil, &exitError{code: exitUsage, err: redisRefusal(cfg, err)}
	}
	return st, nil
}

// redisRefusal is err named at the key of cfg that fixes it, when Redis
// refused syncd's login (NOAUTH, WRONGPASS) or a command to its user
// (NOPERM, or a script's command refused); other errors, and one named
// at a key already, as they are. An admin command's NOPERM read
// "unknown: NOPERM this user has no permissions to run the 'zscore'
// command" (syncd requeue), and did not say what to change.
func redisRefusal(cfg *config.File, err error) error {
	if fe := (*config.FieldError)(nil); err == nil || errors.As(err, &fe) {
		return err
	}
	switch {
	case store.IsPermission(err):
		return cfg.At("redis.username", fmt.Errorf("%w (Redis user %q lacks a permission this command needs: "+
			"grant it the commands the README's least-privilege ACL lists, on the keys under redis.key_prefix)", store.Permission(err), cfg.RedisUser()))
	case strings.Contains(err.Error(), "NOAUTH"):
		return cfg.At("redis.addrs", fmt.Errorf("%w (this Redis asks for a password: set redis.password_file or redis.password_env)", err))
	case strings.Contains(err.Error(), "WRONGPASS"):
		return cfg.At(cfg.PasswordField(), fmt.Errorf("%w (Redis refused the password, or redis.username, that this names)", err))
	}
	return err
}

// explain names, in *err, the key of the loaded configuration that fixes
// a refusal of Redis's in it (redisRefusal), keeping its exit code; each
// command that talks to Redis defers it.
func (f *flags) explain(err *error) {
	if *err == nil || f.cfg == nil {
		return
	}
	if ee, ok := (*err).(*exitError); ok {
		if ee.err != nil {
			*err = &exitError{code: ee.code, err: redisRefusal(f.cfg, ee.err)}
		}
		return
	}
	*err = redisRefusal(f.cfg, *err)
}

// noDeployment is the error of a command that reads a deployment Redis
// does not hold: exit 1, naming where it looked.
func noDeployment(st *store.Store) error {
	return &exitError{code: exitFailed, err: fmt.Errorf(
		"no deployment in %s: nothing was added there yet, or redis lost its data; syncd run or syncd items add creates it (check redis.addrs, redis.db and redis.key_prefix)",
		deploymentAt(st))}
}

// deploymentAt is where st looks for its deployment.
func deploymentAt(st *store.Store) string {
	return fmt.Sprintf("redis (%s) under key prefix %q", st.Addr(), st.Keys().Prefix())
}

// openStoreRetry opens the store, retrying with backoff while Redis is
// unreachable, until ctx ends. Configuration errors are not retried. It
// returns ctx's cause as soon as ctx ends: go-redis does not cut a read
// short for a cancelled context, so an attempt on a Redis that accepts
// and does not answer (a paused one) would hold a stop up for its read
// timeout. The attempt left behind ends with the process; a store it
// opens late is closed.
func openStoreRetry(ctx context.Context, cfg *config.File, log zerolog.Logger) (*store.Store, error) {
	type opened struct {
		st  *store.Store
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		wait := 500 * time.Millisecond
		for {
			st, err := openStore(ctx, cfg, log)
			if err == nil || !store.IsUnavailable(err) || ctx.Err() != nil {
				ch <- opened{st, err}
				return
			}
			log.Warn().Err(err).Int64("retry_in_ms", wait.Milliseconds()).Msg("redis unreachable; retrying")
			select {
			case <-ctx.Done():
				ch <- opened{nil, err}
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 10*time.Second)
		}
	}()
	select {
	case o := <-ch:
		return o.st, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.st != nil {
				o.st.Close()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

// tracedEngine starts tracing (off unless OTEL_* turns it on) and builds
// the engine over st (buildEngine). The caller calls done after the
// engine stopped: it closes the sink, then flushes the last spans.
func tracedEngine(ctx context.Context, cfg *config.File, st *store.Store, log zerolog.Logger) (e *engine.Engine, done func(), err error) {
	tp, stopTracing, err := startTracing(ctx, log)
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	e, sink, err := buildEngine(ctx, cfg, st, log, tp)
	if err != nil {
		stopTracing()
		return nil, nil, err
	}
	return e, func() { sink.Close(); stopTracing() }, nil
}

// buildEngine builds the sink, seeds the configured items and builds
// the engine over st, tracing to tp (nil: off). The caller closes the
// sink after the engine stopped. The sink comes first: one that cannot
// be built (a file it may not open) stops the command before the items
// are written to Redis, where they were seeded first (an outside trial).
func buildEngine(ctx context.Context, cfg *config.File, st *store.Store, log zerolog.Logger,
	tp trace.TracerProvider) (*engine.Engine, sinks.Sink, error) {
	sink, err := cfg.BuildSink(log)
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	if err := seed(ctx, cfg, st, log); err != nil {
		sink.Close()
		return nil, nil, err
	}
	ecfg := cfg.Engine()
	ecfg.Logger = log
	ecfg.TracerProvider = tp // nil: off
	ecfg.Version = version
	ecfg.Items.Source, ecfg.Items.Changed = sources(cfg, log)
	e, err := engine.New(st, sink, ecfg)
	if err != nil {
		sink.Close()
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	return e, sink, nil
}

// adminStore loads the config named by f and opens its store for an
// admin command, logging warnings only, and nothing of go-redis's
// (newAdminLogger); the config's own warnings go to stderr
// (printConfigWarnings).
func adminStore(ctx context.Context, f *flags, stderr io.Writer) (*store.Store, error) {
	cfg, err := f.load()
	if err != nil {
		return nil, err
	}
	printConfigWarnings(cfg, stderr)
	return openStore(ctx, cfg, newAdminLogger(cfg, os.Stderr))
}

// adminReadStore is adminStore for a command that only reads (status,
// items list): it writes nothing to Redis (openReadStore), and fails
// with noDeployment when Redis holds no deployment under the prefix.
func adminReadStore(ctx context.Context, f *flags, stderr io.Writer) (*store.Store, error) {
	st, err := adminOpenRead(ctx, f, stderr)
	if err != nil {
		return nil, err
	}
	if !st.Deployed() {
		st.Close()
		return nil, noDeployment(st)
	}
	return st, nil
}

// adminOpenRead is adminReadStore without its check for a deployment
// (Store.Deployed), for status --watch, which waits for one.
func adminOpenRead(ctx context.Context, f *flags, stderr io.Writer) (*store.Store, error) {
	cfg, err := f.load()
	if err != nil {
		return nil, err
	}
	printConfigWarnings(cfg, stderr)
	return openReadStore(ctx, cfg, newAdminLogger(cfg, os.Stderr))
}

// printConfigWarnings writes to w, one a line, what the configuration
// runs with but should not (config.File.Warnings), as validate says it:
// the admin commands read the same files as run, which logs them, but a
// person runs them and reads plain text, and their stdout (JSON with
// status --json) stays theirs.
func printConfigWarnings(cfg *config.File, w io.Writer) {
	for _, fe := range cfg.Warnings() {
		fmt.Fprintln(w, "syncd: warning:", fe)
	}
}

// adminStoreWarn is adminStore, and warns on stderr when the store is
// the embedded one (an admin command's changes then end with it).
func adminStoreWarn(ctx context.Context, f *flags, stderr io.Writer) (*store.Store, error) {
	st, err := adminStore(ctx, f, stderr)
	if err == nil {
		warnEmbedded(st, stderr)
	}
	return st, err
}

// seed adds the configured items; existing ones are left as they are.
func seed(ctx context.Context, cfg *config.File, st *store.Store, log zerolog.Logger) error {
	ids, err := cfg.Items(nil)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if len(ids) == 0 {
		return nil
	}
	n, err := st.Add(ctx, ids...)
	if err != nil {
		return err
	}
	log.Info().Int("configured", len(ids)).Int("new", n).Msg("items seeded from the config")
	return nil
}

// runHistory samples hist until ctx ends or the returned stop is called;
// stop waits for the sampler to end.
func runHistory(ctx context.Context, hist *api.History) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); hist.Run(ctx) }()
	return func() { cancel(); <-done }
}

// apiOptions are the API's options for the target tc: its state is shown
// when it has a breaker or limits.
func apiOptions(tc engine.TargetConfig) []api.Option {
	if !tc.Breaker.Disabled || tc.MaxInFlight > 0 || tc.Rate != (engine.Rate{}) {
		return []api.Option{api.WithTarget(tc.MaxInFlight)}
	}
	return nil
}
