//go:build unix

// Package exec provides a sink that runs a command for each item.
//
// The command is an argv, run without a shell: write
// ["sh", "-c", "..."] to get one. Standard input and output are /dev/null.
// Exit status 0 is success. Any other outcome is an error carrying the
// exit status and the tail of the command's stderr, whose class (see
// sinks.Classify) the exit status decides, through Config.ExitCodes:
//
//	75 (EX_TEMPFAIL)  the target is unavailable: sinks.Unavailable, not
//	                  counted against the item
//	65 (EX_DATAERR)   the item is bad: sinks.Permanent, quarantined (see the README's breaker rule)
//	79                the target rejected the fence: wraps
//	                  sinks.ErrStaleFence, the attempt is dropped (counted
//	                  against the item if its claim was still current)
//	any other         ordinary error: retried with backoff, quarantined
//	                  after max_attempts
//
// Those are the defaults (ExitCodesDefault); Config.ExitCodes overrides
// them per status. A command killed by a signal, or stopped because the
// sync's context ended or Config.Timeout passed, has an ordinary error,
// whatever status it then exits with.
//
// The end of stderr an error quotes is logged and stored with the item,
// where status, the API and the web page show it. In it the values of the
// Config.Env variables whose names say they are secrets (API_TOKEN,
// DB_PASSWORD: redact.SecretName) read [redacted], credentials named as
// such (token=..., password=..., Bearer ...) read xxxxx, and so do the
// user information of URLs and their query values but those of harmless
// names (page=, sort=, ...).
//
// # Environment
//
// The command does not inherit syncd's environment, which holds secrets
// such as the variable named by redis.password_env. It gets only the
// allow-list of syncd's environment,
//
//	PATH HOME USER LOGNAME SHELL TMPDIR TZ LANG LANGUAGE LC_*
//
// then Config.Env, which overrides them, then the item:
//
//	SYNCD_ID            the item ID
//	SYNCD_FENCE         the fence of the claim, a decimal uint64
//	SYNCD_OWNER         the worker holding the claim
//	SYNCD_ATTEMPT       the attempt, from 1
//	SYNCD_LAST_SYNC_MS  the last successful sync in Unix milliseconds,
//	                    empty when the item never synced
//
// and, when the sync's context carries a valid span (the engine's
// syncd.sync span, with engine.Config.TracerProvider set), its W3C Trace
// Context, as OpenTelemetry's environment carriers name it:
//
//	TRACEPARENT         the span's traceparent, 00-<trace>-<span>-<flags>
//	TRACESTATE          its tracestate, only when it has one
//
// Without a span neither is set by the sink (syncd's own TRACEPARENT is
// not on the allow-list; one in Config.Env passes as given).
//
// Anything else a command needs, a token or a proxy setting, goes in
// Config.Env.
//
// # Stopping
//
// Each command runs in a process group of its own. When the sync's context
// is done (the lease was lost, syncd is stopping) or Config.Timeout passes,
// the sink sends SIGTERM to the whole group, and SIGKILL Config.Grace later
// if the command is still running. Whenever the command exits, anything it
// left running in its group is killed with SIGKILL, and the sink always
// waits for the command, so it leaves neither zombies nor orphans behind. A
// descendant that moved to another process group or session (setsid,
// daemonising) escapes this; the sink then stops reading stderr shortly
// after the command exited rather than waiting for it.
//
// The same holds when syncd dies, even by SIGKILL: the command's group gets
// SIGTERM at once and SIGKILL Config.Grace later, so a command does not go
// on writing after its lease ended and the next owner started. It holds as
// well while syncd lives but runs no code (paused by SIGSTOP, a stalled
// VM): the engine passes the lease's end in Sync's context
// (sinks.LeaseExpiry), and the command's group gets SIGTERM when it
// passes, whether or not syncd is running then. Keep the grace below the
// lease margin (see GraceDefault).
//
// # The supervisor
//
// To survive syncd, the signalling is done by a small supervisor process
// between syncd and each command: syncd's own binary, started again with
// the argv[0] "syncd-exec-supervisor" and the variable
// SYNCD_EXEC_SUPERVISOR=1, which this package's init function recognises
// and acts on before main runs. A program that uses this package therefore
// must not be started that way for any other purpose; an ordinary start
// cannot be mistaken for it. The supervisor adds a fork and exec of that
// binary to each sync, and exits as the command did, so that exit statuses
// and signals read as before. It watches a pipe only syncd can write to,
// and stops the command's group when that pipe closes; SIGTERM sent to the
// supervisor does the same. supervisor.go has the details.
package exec

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/internal/redact"
	"github.com/syncd/syncd/sinks"
)

// Log field keys.
const (
	fieldComponent = "component"
	fieldCommand   = "command"
	fieldID        = "id"
	fieldPID       = "pid"
	fieldExit      = "exit"
	fieldTook      = "took"
)

// Defaults for zero Config fields.
const (
	// GraceDefault is Config.Grace when it is zero. A deployment must keep
	// the grace below the lease margin (ownership.margin): a command that
	// ignores SIGTERM runs for up to the grace after its lease was lost,
	// and the lease is trusted for up to the margin less than its TTL.
	GraceDefault = 5 * time.Second

	// StderrTailDefault is Config.StderrTail when it is zero.
	StderrTailDefault = 2048
)

// Exit statuses that have a class unless Config.ExitCodes says otherwise.
// The first two are those of sysexits.h.
const (
	// ExitUnavailableDefault, EX_TEMPFAIL: the target is unavailable
	// (sinks.ClassTarget), so the failure is not counted against the
	// item.
	ExitUnavailableDefault = 75

	// ExitPermanentDefault, EX_DATAERR: the item is bad and retrying
	// cannot help (sinks.ClassPermanent): it is quarantined, at its
	// second attempt at the earliest, one backoff after the first, so
	// that the target's breaker can tell one bad item from a target that
	// fails every item (the README's breaker rule).
	ExitPermanentDefault = 65

	// ExitStaleDefault: the target rejected the fence (sinks.ClassStale):
	// the attempt is dropped. sysexits.h has no such status and ends at
	// 78 (EX_CONFIG); 79 is the first status after it.
	ExitStaleDefault = 79
)

// ExitCodesDefault returns the exit statuses that have a class when
// Config.ExitCodes does not map them, in a new map each call:
//
//	ExitUnavailableDefault (75)  sinks.ClassTarget
//	ExitPermanentDefault   (65)  sinks.ClassPermanent
//	ExitStaleDefault       (79)  sinks.ClassStale
func ExitCodesDefault() map[int]sinks.Class {
	return map[int]sinks.Class{
		ExitUnavailableDefault: sinks.ClassTarget,
		ExitPermanentDefault:   sinks.ClassPermanent,
		ExitStaleDefault:       sinks.ClassStale,
	}
}

// The defaults' old names, kept for existing callers.
const (
	// DefaultGrace is the old name of GraceDefault.
	//
	// Deprecated: use GraceDefault.
	DefaultGrace = GraceDefault

	// DefaultStderrTail is the old name of StderrTailDefault.
	//
	// Deprecated: use StderrTailDefault.
	DefaultStderrTail = StderrTailDefault
)

// stderrDrain bounds how long the sink reads stderr after the command and
// its group are gone, for descendants that left the group holding it open.
const stderrDrain = time.Second

// Config configures an exec sink.
type Config struct {
	// Command is the program and its arguments. A program name without a
	// slash is looked up in PATH once, by New; a relative path is relative
	// to Dir. Required.
	Command []string

	// Env holds environment variables, as "KEY=value", added to those of
	// the allow-list (see the package documentation); they override
	// allow-listed variables of the same name. SYNCD_* variables are set
	// by the sink and may not be given. Default none.
	Env []string

	// Dir is the working directory of the command; it must exist. Default
	// "": the working directory of syncd.
	Dir string

	// Timeout bounds each run of the command; when it passes, the command
	// is stopped as on cancellation and Sync returns an error wrapping
	// context.DeadlineExceeded. Default 0: no timeout. The lease is no
	// bound: heartbeats renew it for as long as the command runs, so
	// without a timeout a command that hangs holds its item until syncd
	// stops or loses the lease.
	Timeout time.Duration

	// Grace is how long a command has to exit after SIGTERM before the
	// sink sends SIGKILL to its process group. Default GraceDefault (5 s).
	// Keep it below the lease margin: see GraceDefault.
	Grace time.Duration

	// StderrTail is how many bytes of the end of the command's stderr an
	// error quotes. Default StderrTailDefault (2048).
	StderrTail int

	// ExitCodes says what an exit status other than 0 means (see
	// sinks.Classify): sinks.ClassTarget, the target is unavailable;
	// sinks.ClassPermanent, quarantine the item at once;
	// sinks.ClassStale, the target rejected the fence; sinks.ClassItem,
	// an ordinary, retryable failure. Statuses are 1 to 255. The entries
	// are merged over ExitCodesDefault (75 target, 65 permanent, 79
	// stale): an entry overrides the default for its status, and mapping
	// a default status to sinks.ClassItem turns that default off. A
	// status mapped by neither is sinks.ClassItem. Default nil: the
	// defaults alone.
	ExitCodes map[int]sinks.Class
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Grace == 0 {
		c.Grace = GraceDefault
	}
	if c.StderrTail == 0 {
		c.StderrTail = StderrTailDefault
	}
	return c
}

// Validate reports every invalid field of c, each error naming its field,
// joined with errors.Join. It does not look at the file system; New does.
func (c Config) Validate() error {
	var errs []error
	if len(c.Command) == 0 || c.Command[0] == "" {
		errs = append(errs, sinks.ConfigErrorf("exec", "command", "must not be empty"))
	}
	for i, arg := range c.Command {
		if strings.IndexByte(arg, 0) >= 0 {
			errs = append(errs, sinks.ConfigErrorf("exec", "command", "argument %d contains NUL", i))
		}
	}
	for i, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "" || strings.IndexByte(kv, 0) >= 0:
			errs = append(errs, &sinks.ConfigError{Sink: "exec", Field: "env", Entry: strconv.Itoa(i), Reason: fmt.Sprintf("%q is not KEY=value", kv)})
		case strings.HasPrefix(k, "SYNCD_"):
			errs = append(errs, &sinks.ConfigError{Sink: "exec", Field: "env", Entry: strconv.Itoa(i), Reason: k + " is set by the sink"})
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, sinks.ConfigErrorf("exec", "timeout", "must not be negative, got %v", c.Timeout))
	}
	if c.Grace < 0 {
		errs = append(errs, sinks.ConfigErrorf("exec", "grace", "must not be negative, got %v", c.Grace))
	}
	if c.StderrTail < 0 {
		errs = append(errs, sinks.ConfigErrorf("exec", "stderr_tail", "must not be negative, got %d", c.StderrTail))
	}
	errs = append(errs, c.validateExitCodes()...)
	return errors.Join(errs...)
}

// validateExitCodes reports every invalid entry of c.ExitCodes, by status.
func (c Config) validateExitCodes() []error {
	var errs []error
	for _, code := range slices.Sorted(maps.Keys(c.ExitCodes)) {
		bad := func(format string, args ...any) {
			e := sinks.ConfigErrorf("exec", "exit_codes", "status %d: "+format, append([]any{code}, args...)...)
			e.Entry = strconv.Itoa(code)
			errs = append(errs, e)
		}
		if code < 1 || code > 255 {
			bad("must be 1 to 255")
		}
		switch class := c.ExitCodes[code]; class {
		case sinks.ClassItem, sinks.ClassTarget, sinks.ClassPermanent, sinks.ClassStale:
		default:
			bad("class must be %v, %v, %v or %v, got %v (%d)",
				sinks.ClassItem, sinks.ClassTarget, sinks.ClassPermanent, sinks.ClassStale, class, int(class))
		}
	}
	return errs
}

// exitCodes returns c.ExitCodes merged over ExitCodesDefault, without
// the statuses that are ordinary failures.
func (c Config) exitCodes() map[int]sinks.Class {
	codes := ExitCodesDefault()
	maps.Copy(codes, c.ExitCodes)
	maps.DeleteFunc(codes, func(_ int, class sinks.Class) bool { return class == sinks.ClassItem })
	return codes
}

// envSecrets returns the values of the Config.Env variables whose names
// say they are secrets (API_TOKEN, DB_PASSWORD), as validate redacts
// them: a command that prints its environment, or a URL built from it,
// on stderr would otherwise put them in the item's error, which logs,
// status, the API and the web page show.
func envSecrets(env []string) *redact.Secrets {
	var values []string
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && redact.SecretName(k) {
			values = append(values, v)
		}
	}
	return redact.NewSecrets(values...)
}

// Sink is a sink that runs a command per item. It is safe for concurrent
// use: each Sync runs its own process.
type Sink struct {
	self      string   // the program that runs the supervisor: syncd
	superArgs []string // the supervisor's argv, naming the command
	env       []string // allow-listed variables of syncd's environment, then Config.Env
	dir       string
	timeout   time.Duration
	grace     time.Duration
	tail      int
	exitCodes map[int]sinks.Class // Config.exitCodes: read only
	secrets   *redact.Secrets     // hidden in the stderr an error quotes
	logger    zerolog.Logger
}

var _ sinks.Sink = (*Sink)(nil)

// New checks that the command can be run and returns a sink that logs to a
// sub-logger of logger with the field component=sink.exec. A program that
// does not exist or is not executable is an error here, not at sync time:
// retrying cannot fix a configuration.
func New(cfg Config, logger zerolog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir != "" {
		fi, err := os.Stat(cfg.Dir)
		if err != nil {
			return nil, sinks.ConfigErrorf("exec", "dir", "%w", err)
		}
		if !fi.IsDir() {
			return nil, sinks.ConfigErrorf("exec", "dir", "%q is not a directory", cfg.Dir)
		}
	}
	path, err := lookPath(cfg.Command[0], cfg.Dir)
	if err != nil {
		return nil, err
	}
	self, err := selfExe()
	if err != nil {
		return nil, fmt.Errorf("exec: the supervisor's program: %w", err)
	}
	cfg = cfg.WithDefaults()
	s := &Sink{
		self:      self,
		superArgs: supervisorArgs(cfg.Grace, path, cfg.Command),
		env:       append(InheritedEnv(os.Environ()), cfg.Env...),
		dir:       cfg.Dir,
		timeout:   cfg.Timeout,
		grace:     cfg.Grace,
		tail:      cfg.StderrTail,
		exitCodes: cfg.exitCodes(),
		secrets:   envSecrets(cfg.Env),
		logger:    logger.With().Str(fieldComponent, "sink.exec").Str(fieldCommand, cfg.Command[0]).Logger(),
	}
	return s, nil
}

// Program is the file the sink would run for cfg's command: found
// through PATH when it has no slash, else relative to cfg.Dir. An error
// says why there is none, naming the key, as New does.
func Program(cfg Config) (string, error) {
	if len(cfg.Command) == 0 {
		return "", sinks.ConfigErrorf("exec", "command", "must not be empty")
	}
	path, err := lookPath(cfg.Command[0], cfg.Dir)
	if err == nil && !filepath.IsAbs(path) && cfg.Dir != "" {
		path = inDir(cfg.Dir, path)
	}
	return path, err
}

// inDir is the relative path name as the kernel finds it from dir: not
// cleaned, as filepath.Join would, since "link/../prog" is the prog
// beside the link's target, not beside the link (an outside trial ran
// a program from a 0777 directory that the check, given the cleaned
// path, never looked at).
func inDir(dir, name string) string {
	return strings.TrimSuffix(dir, "/") + "/" + name
}

// lookPath resolves name as the command would be run: through PATH when it
// has no slash, else relative to dir.
func lookPath(name, dir string) (string, error) {
	check := name
	if strings.Contains(name, "/") && !filepath.IsAbs(name) && dir != "" {
		check = inDir(dir, name)
	}
	found, err := osexec.LookPath(check)
	if err != nil {
		var e *osexec.Error
		if errors.As(err, &e) {
			err = e.Err // drop os/exec's own "exec: %q: " prefix
		}
		return "", sinks.ConfigErrorf("exec", "command", "%q: %w", name, err)
	}
	if strings.Contains(name, "/") {
		// Keep the configured path: os/exec resolves a relative one
		// against Dir when it starts the process.
		return name, nil
	}
	return found, nil
}

// Sync runs the command for item under a supervisor and waits for both,
// and for the command's process group to be gone. See the package
// documentation for the outcome.
func (s *Sink) Sync(ctx context.Context, item sinks.Item) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("exec: item %q: not started: %w", item.ID, cause)
	}
	runCtx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}

	start := time.Now()
	r, err := s.start(item, traceEnv(ctx))
	if err != nil {
		return fmt.Errorf("exec: item %q: start: %w", item.ID, err)
	}
	expiry := sinks.LeaseExpiry(ctx)
	stopped, ended, waitErr := r.wait(runCtx, expiry, s.grace)
	h := r.finish()
	if !h.ok {
		// The supervisor ended before it started the command.
		return fmt.Errorf("exec: item %q: supervisor: %w%s", item.ID, exitErr(waitErr), r.detail())
	}
	if h.err != nil {
		return fmt.Errorf("exec: item %q: start: %w", item.ID, h.err)
	}
	s.logger.Debug().Str(fieldID, item.ID).Int(fieldPID, h.pid).Str(fieldExit, exitText(waitErr)).
		Dur(fieldTook, time.Since(start)).Msg("command exited")

	if (stopped != "" || h.expired) && waitErr == nil {
		waitErr = errExitZero // the command exited 0 on SIGTERM; the sync was still cut short
	}
	detail := r.detail()
	switch {
	case stopped != "" && ctx.Err() != nil:
		return fmt.Errorf("exec: item %q: %w: %s: %w%s", item.ID, context.Cause(ctx), stopped, waitErr, detail)
	case h.expired:
		// The supervisor's watchdog, at an end it was told: while this
		// process ran no code (paused), or before a heartbeat's later
		// end reached it (the lease test saw that under load, and the
		// error said only "signal: terminated"). It says so, so the
		// command's exit does not decide: one that traps SIGTERM and
		// exits 143 counted as the item's failure (an outside trial).
		return fmt.Errorf("exec: item %q: %w at %s, and the supervisor stopped the command: %w%s",
			item.ID, sinks.ErrLeaseEnded, ended.Format("2006-01-02T15:04:05.000Z07:00"), waitErr, detail)
	case stopped != "":
		return fmt.Errorf("exec: item %q: timeout after %v (%w): %s: %w%s",
			item.ID, s.timeout, context.DeadlineExceeded, stopped, waitErr, detail)
	case waitErr != nil:
		return fmt.Errorf("exec: item %q: %w", item.ID, s.classify(waitErr, detail))
	}
	return nil
}

// classify returns waitErr, the exit of a command that ended by itself,
// with detail and wrapped in the class that Config.ExitCodes gives its
// exit status. A command killed by a signal has no exit status: its
// error is an ordinary one.
func (s *Sink) classify(waitErr error, detail string) error {
	err := fmt.Errorf("%w%s", waitErr, detail)
	var ee *osexec.ExitError
	if !errors.As(waitErr, &ee) || !ee.Exited() {
		return err
	}
	switch s.exitCodes[ee.ExitCode()] {
	case sinks.ClassTarget:
		return sinks.Unavailable(err)
	case sinks.ClassPermanent:
		return sinks.Permanent(err)
	case sinks.ClassStale:
		return fmt.Errorf("%w: %w", err, sinks.ErrStaleFence)
	}
	return err
}

// run is one run of the command under its supervisor.
type run struct {
	cmd     *osexec.Cmd     // the supervisor
	ctl     *os.File        // write end of the supervisor's stdin: the lifeline
	stderr  *os.File        // read end of the stderr pipe
	tail    *TailBuffer     // what was read from stderr
	secrets *redact.Secrets // the sink's: see detail
	copied  chan struct{}   // closed when the copy from stderr ended
	hello   chan hello      // the supervisor's first line
	helloR  *os.File        // read end of the supervisor's stdout
	waited  chan error      // the supervisor's exit
}

// start starts the supervisor, which starts the command, and the
// goroutines that read its output and wait for it.
func (s *Sink) start(item sinks.Item, traceEnv []string) (*run, error) {
	// Stderr goes through a pipe we own rather than a writer os/exec
	// copies from, so that we decide how long to wait for it: os/exec
	// would wait for every holder of the pipe, including descendants that
	// escaped the process group.
	files, err := pipes(3)
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, outR, outW, errR, errW := files[0], files[1], files[2], files[3], files[4], files[5]
	cmd := &osexec.Cmd{
		Path:        s.self,
		Args:        s.superArgs,
		Env:         append(append(s.environ(item), traceEnv...), supervisorEnv+"=1"),
		Dir:         s.dir,
		Stdin:       ctlR,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}, // out of reach of signals for syncd's group
	}
	err = cmd.Start()
	closeAll(ctlR, outW, errW) // the supervisor holds its own copies
	if err != nil {
		closeAll(ctlW, outR, errR)
		return nil, err
	}
	r := &run{
		cmd: cmd, ctl: ctlW, stderr: errR, helloR: outR,
		tail:    NewTailBuffer(s.tail),
		secrets: s.secrets,
		copied:  make(chan struct{}),
		hello:   make(chan hello, 1),
		waited:  make(chan error, 1),
	}
	go func() {
		defer close(r.copied)
		io.Copy(r.tail, errR) // ends at EOF, or with an error when errR is closed
	}()
	go func() {
		br := bufio.NewReader(io.LimitReader(outR, 4096))
		h := readHello(br)
		if h.ok && h.err == nil {
			s.logger.Debug().Str(fieldID, item.ID).Int(fieldPID, h.pid).Msg("command started")
			h.expired = saidExpired(br)
		}
		r.hello <- h
	}()
	go func() { r.waited <- cmd.Wait() }()
	return r, nil
}

// wait waits for the supervisor to exit. When ctx is done first it has the
// supervisor send SIGTERM to the command's group, and SIGKILL grace later,
// and says so in stopped. Meanwhile it keeps the supervisor told of the
// lease's end (expiry, when not nil), which the supervisor enforces by
// itself should this process stop running (see supervisor.go). It
// returns the end the supervisor may have stopped the command at: the
// first end told that passed before a heartbeat's later one was told,
// else the last told (zero without expiry).
func (r *run) wait(ctx context.Context, expiry func() time.Time, grace time.Duration) (stopped string, told time.Time, waitErr error) {
	var poll <-chan time.Time
	var t *time.Timer
	var lapsed time.Time // the first end told that passed before a later one was told
	if expiry != nil {
		told = expiry()
		r.tell(told)
		t = time.NewTimer(leasePoll(told))
		defer t.Stop()
		poll = t.C
	}
wait:
	for {
		select {
		case waitErr = <-r.waited:
			return "", cmp.Or(lapsed, told), waitErr
		case <-ctx.Done():
			break wait
		case <-poll:
			if e := expiry(); !e.Equal(told) {
				if lapsed.IsZero() && !time.Now().Before(told) {
					lapsed = told // the supervisor may have acted on it
				}
				told = e
				r.tell(e)
			}
			t.Reset(leasePoll(told))
		}
	}
	r.send(ctlTerm)
	stopped = "sent SIGTERM"
	g := time.NewTimer(grace)
	defer g.Stop()
	select {
	case waitErr = <-r.waited:
	case <-g.C:
		r.send(ctlKill)
		stopped = fmt.Sprintf("sent SIGTERM, then SIGKILL after %v", grace)
		waitErr = <-r.waited
	}
	return stopped, cmp.Or(lapsed, told), waitErr
}

// send writes a control byte to the supervisor. An error means it has
// exited, which wait sees.
func (r *run) send(b byte) { _, _ = r.ctl.Write([]byte{b}) }

// tell sends the supervisor the lease's end (none for a zero time).
func (r *run) tell(deadline time.Time) {
	if !deadline.IsZero() {
		_, _ = r.ctl.Write(leaseMsg(deadline))
	}
}

// leasePoll is how long wait waits before it looks again for a
// heartbeat's new lease end to pass on: 100 ms, and more often as the
// end told comes near (a quarter of what is left, at least 1 ms), so
// that a heartbeat set to renew late still reaches the supervisor before
// the end it knows passes.
func leasePoll(end time.Time) time.Duration {
	return min(100*time.Millisecond, max(time.Until(end)/4, time.Millisecond))
}

// finish is called once the supervisor exited: the command is reaped and
// its group killed. It kills the group again, stops reading stderr
// shortly after (for descendants that left the group holding it open),
// releases the pipes and returns the supervisor's hello.
func (r *run) finish() hello {
	r.ctl.Close() // the lifeline; its reader is gone
	h := <-r.hello
	if h.ok && h.err == nil {
		// Normally the supervisor did this already. If it was itself
		// killed, the group has no one else to stop it. Until all its
		// members are gone, the group's ID cannot be reused.
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
	}
	r.helloR.Close()
	drain := time.NewTimer(stderrDrain)
	select {
	case <-r.copied:
	case <-drain.C:
		r.stderr.Close() // unblocks the copy
		<-r.copied
	}
	drain.Stop()
	r.stderr.Close()
	return h
}

// detail quotes the tail of stderr for an error, after finish.
func (r *run) detail() string {
	if t := r.tail.String(); t != "" {
		return fmt.Sprintf("; stderr: %q", redact.Tail(t, r.secrets))
	}
	return ""
}

// pipes returns n pipes as read end, write end, read end, ...
func pipes(n int) ([]*os.File, error) {
	var files []*os.File
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(files...)
			return nil, fmt.Errorf("pipe: %w", err)
		}
		files = append(files, r, w)
	}
	return files, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// exitErr is err, or errExitZero for nil.
func exitErr(err error) error {
	if err == nil {
		return errExitZero
	}
	return err
}

// environ returns the command's environment. os/exec keeps the last of
// duplicate keys, so Config.Env overrides allow-listed variables and the
// SYNCD_* variables override both.
func (s *Sink) environ(item sinks.Item) []string {
	env := slices.Clip(s.env)
	var last string
	if !item.LastSync.IsZero() {
		last = strconv.FormatInt(item.LastSync.UnixMilli(), 10)
	}
	return append(env,
		"SYNCD_ID="+item.ID,
		"SYNCD_FENCE="+strconv.FormatUint(item.Fence, 10),
		"SYNCD_OWNER="+item.Owner,
		"SYNCD_ATTEMPT="+strconv.Itoa(item.Attempt),
		"SYNCD_LAST_SYNC_MS="+last,
	)
}

// traceContext reads the sync's span for traceEnv: a value of our own,
// not otel's global propagator.
var traceContext propagation.TraceContext

// traceEnv returns TRACEPARENT and, when there is one, TRACESTATE of the
// span in ctx; nil when ctx carries no valid span.
func traceEnv(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	env := []string{"TRACEPARENT=" + carrier.Get("traceparent")}
	if ts := carrier.Get("tracestate"); ts != "" {
		env = append(env, "TRACESTATE="+ts)
	}
	return env
}

// InheritedEnv returns the variables of environ (os.Environ()) on the
// allow-list of the package documentation. Everything else, secrets
// included, stays with syncd. syncd's items.command gets the same.
func InheritedEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "LC_"):
		case slices.Contains(allowEnv, k):
		default:
			continue
		}
		out = append(out, kv)
	}
	return out
}

// allowEnv is the allow-list of inherited variables, with LC_*.
var allowEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE"}

var errExitZero = errors.New("exit status 0")

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// TailBuffer is an io.Writer that keeps the last n bytes written to it,
// for quoting the end of a command's stderr. It is not safe for
// concurrent use: one goroutine writes, and String is called after it
// ended.
type TailBuffer struct {
	buf  []byte
	n    int
	lost bool // whether bytes were dropped from the front
}

// NewTailBuffer returns a TailBuffer that keeps the last n bytes.
func NewTailBuffer(n int) *TailBuffer { return &TailBuffer{n: n} }

func (t *TailBuffer) Write(p []byte) (int, error) {
	written := len(p)
	if len(p) >= t.n {
		t.lost = t.lost || len(t.buf) > 0 || len(p) > t.n
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		return written, nil
	}
	if over := len(t.buf) + len(p) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.lost = true
	}
	t.buf = append(t.buf, p...)
	return written, nil
}

// String returns the tail, trimmed, marked with a leading "…" when the
// start was cut.
func (t *TailBuffer) String() string {
	b := t.buf
	if t.lost {
		// Do not start in the middle of a UTF-8 sequence.
		for i := 0; i < 3 && len(b) > 0 && b[0]&0xC0 == 0x80; i++ {
			b = b[1:]
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if t.lost && s != "" {
		s = "…" + s
	}
	return s
}

// Close does nothing and returns nil: every Sync waits for its command, so
// once the last Sync returned no process of the sink is left.
func (s *Sink) Close() error { return nil }
