//go:build unix

// Package exec provides a sink that runs a command for each item.
//
// The command is an argv, run without a shell: write
// ["sh", "-c", "..."] to get one. Exit status 0 is success. Any other
// outcome is an ordinary, retryable error carrying the exit status and the
// tail of the command's stderr. No exit status means "permanent" or "stale
// fence": a command that needs to say so needs a sink of its own. Standard
// input and output are /dev/null.
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
package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

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
		errs = append(errs, errors.New("exec: command: must not be empty"))
	}
	for i, arg := range c.Command {
		if strings.IndexByte(arg, 0) >= 0 {
			errs = append(errs, fmt.Errorf("exec: command: argument %d contains NUL", i))
		}
	}
	for _, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "" || strings.IndexByte(kv, 0) >= 0:
			errs = append(errs, fmt.Errorf("exec: env: %q is not KEY=value", kv))
		case strings.HasPrefix(k, "SYNCD_"):
			errs = append(errs, fmt.Errorf("exec: env: %s is set by the sink", k))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("exec: timeout: must not be negative, got %v", c.Timeout))
	}
	if c.Grace < 0 {
		errs = append(errs, fmt.Errorf("exec: grace: must not be negative, got %v", c.Grace))
	}
	if c.StderrTail < 0 {
		errs = append(errs, fmt.Errorf("exec: stderr_tail: must not be negative, got %d", c.StderrTail))
	}
	return errors.Join(errs...)
}

// Sink is a sink that runs a command per item. It is safe for concurrent
// use: each Sync runs its own process.
type Sink struct {
	path    string   // resolved program
	args    []string // argv, args[0] as configured
	env     []string // allow-listed variables of syncd's environment, then Config.Env
	dir     string
	timeout time.Duration
	grace   time.Duration
	tail    int
	logger  zerolog.Logger
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
			return nil, fmt.Errorf("exec: dir: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("exec: dir: %q is not a directory", cfg.Dir)
		}
	}
	path, err := lookPath(cfg.Command[0], cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	s := &Sink{
		path:    path,
		args:    append([]string(nil), cfg.Command...),
		env:     append(inheritedEnv(os.Environ()), cfg.Env...),
		dir:     cfg.Dir,
		timeout: cfg.Timeout,
		grace:   cfg.Grace,
		tail:    cfg.StderrTail,
		logger:  logger.With().Str(fieldComponent, "sink.exec").Str(fieldCommand, cfg.Command[0]).Logger(),
	}
	return s, nil
}

// lookPath resolves name as the command would be run: through PATH when it
// has no slash, else relative to dir.
func lookPath(name, dir string) (string, error) {
	check := name
	if strings.Contains(name, "/") && !filepath.IsAbs(name) && dir != "" {
		check = filepath.Join(dir, name)
	}
	found, err := osexec.LookPath(check)
	if err != nil {
		var e *osexec.Error
		if errors.As(err, &e) {
			err = e.Err // drop os/exec's own "exec: %q: " prefix
		}
		return "", fmt.Errorf("exec: command: %q: %w", name, err)
	}
	if strings.Contains(name, "/") {
		// Keep the configured path: os/exec resolves a relative one
		// against Dir when it starts the process.
		return name, nil
	}
	return found, nil
}

// Sync runs the command for item and waits for it, and for its process
// group to be gone. See the package documentation for the outcome.
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

	// Stderr goes through a pipe we own rather than a writer os/exec
	// copies from, so that we decide how long to wait for it: os/exec
	// would wait for every holder of the pipe, including descendants that
	// escaped the process group.
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec: item %q: stderr pipe: %w", item.ID, err)
	}
	cmd := &osexec.Cmd{
		Path:        s.path,
		Args:        s.args,
		Env:         s.environ(item),
		Dir:         s.dir,
		Stderr:      pw,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	start := time.Now()
	err = cmd.Start()
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		return fmt.Errorf("exec: item %q: start: %w", item.ID, err)
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group is named after the leader
	s.logger.Debug().Str(fieldID, item.ID).Int(fieldPID, pgid).Msg("command started")

	tail := newTailBuffer(s.tail)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(tail, pr) // ends at EOF, or with an error when pr is closed
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var (
		waitErr error
		stopped string // how the sink stopped the command, if it did
	)
	select {
	case waitErr = <-waited:
	case <-runCtx.Done():
		signalGroup(pgid, syscall.SIGTERM)
		stopped = "sent SIGTERM"
		grace := time.NewTimer(s.grace)
		select {
		case waitErr = <-waited:
		case <-grace.C:
			signalGroup(pgid, syscall.SIGKILL)
			stopped = fmt.Sprintf("sent SIGTERM, then SIGKILL after %v", s.grace)
			waitErr = <-waited
		}
		grace.Stop()
	}
	// The leader is reaped. Kill what it left in its group: background
	// children, or those that ignored SIGTERM. While any member lives the
	// kernel does not reuse the group's ID, so this cannot hit a stranger;
	// when none does, it fails with ESRCH.
	signalGroup(pgid, syscall.SIGKILL)

	drain := time.NewTimer(stderrDrain)
	select {
	case <-copied:
	case <-drain.C:
		pr.Close() // unblocks the copy
		<-copied
	}
	drain.Stop()
	pr.Close()

	took := time.Since(start)
	s.logger.Debug().Str(fieldID, item.ID).Int(fieldPID, pgid).Str(fieldExit, exitText(waitErr)).
		Dur(fieldTook, took).Msg("command exited")

	if stopped != "" && waitErr == nil {
		waitErr = errExitZero // the command exited 0 on SIGTERM; the sync was still cut short
	}
	var detail string
	if t := tail.String(); t != "" {
		detail = fmt.Sprintf("; stderr: %q", t)
	}
	switch {
	case stopped != "" && ctx.Err() != nil:
		return fmt.Errorf("exec: item %q: %w: %s: %w%s", item.ID, context.Cause(ctx), stopped, waitErr, detail)
	case stopped != "":
		return fmt.Errorf("exec: item %q: timeout after %v (%w): %s: %w%s",
			item.ID, s.timeout, context.DeadlineExceeded, stopped, waitErr, detail)
	case waitErr != nil:
		return fmt.Errorf("exec: item %q: %w%s", item.ID, waitErr, detail)
	}
	return nil
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

// inheritedEnv returns the variables of environ on the allow-list of the
// package documentation. Everything else, secrets included, stays with
// syncd.
func inheritedEnv(environ []string) []string {
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

// signalGroup sends sig to the process group pgid. ESRCH, a group already
// gone, is expected and ignored; nothing else can be done about other
// errors.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// tailBuffer is an io.Writer that keeps the last n bytes written to it.
// Only the copying goroutine writes, and String is called after it ended.
type tailBuffer struct {
	buf  []byte
	n    int
	lost bool // whether bytes were dropped from the front
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) Write(p []byte) (int, error) {
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
func (t *tailBuffer) String() string {
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
