package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/term"

	"github.com/syncd/syncd/cmd/syncd/internal/config"
)

// Log timestamps: RFC 3339 in UTC to the millisecond in JSON; the console
// shows the local time of day to the millisecond. Both are set on our
// loggers (msTime, the ConsoleWriter), never through zerolog's globals.
const (
	jsonTimeFormat    = "2006-01-02T15:04:05.000Z07:00"
	consoleTimeFormat = "15:04:05.000"
)

// redisLogEvery is how often one go-redis message (by its format) may
// reach the log: while Redis is down the pool logs every failed dial.
const redisLogEvery = 10 * time.Second

// newLogger is the logger of the daemon (run), batch and ui. It also
// routes go-redis's own messages to the log at warn level, rate-limited
// (see rateLogger): a daemon's log should say the pool failed to dial.
func newLogger(cfg *config.File, w *os.File) zerolog.Logger {
	l := baseLogger(cfg, w)
	redis.SetLogger(newRateLogger(l.With().Str("component", "go-redis").Logger(), redisLogEvery))
	return l
}

// newAdminLogger is the logger of a command a person runs and reads
// (status, items, requeue, trigger, release): warnings and errors only,
// and none of go-redis's own messages. When Redis is down or refuses the
// password, the command's error says so, naming the key to fix; go-redis's
// line before it ("redis: connection pool: failed to dial after 5
// attempts: ...", as JSON in a pipe) said it again in another voice (an
// outside trial). go-redis has one logger for the process
// (redis.SetLogger), which only cmd sets: no library of syncd's does.
func newAdminLogger(cfg *config.File, w *os.File) zerolog.Logger {
	l := baseLogger(cfg, w).Level(max(cfg.LogLevel(), zerolog.WarnLevel))
	redis.SetLogger(discardRedisLog{})
	return l
}

// discardRedisLog drops go-redis's messages (newAdminLogger).
type discardRedisLog struct{}

// Printf implements go-redis's internal.Logging.
func (discardRedisLog) Printf(context.Context, string, ...any) {}

// baseLogger writes to w: console output on a terminal, JSON otherwise,
// unless log.format says which. The console has colours only on a
// terminal, and never with NO_COLOR set.
func baseLogger(cfg *config.File, w *os.File) zerolog.Logger {
	tty := isTerminal(w)
	format := cfg.LogFormat()
	if format == config.FormatAuto {
		format = config.FormatJSON
		if tty {
			format = config.FormatConsole
		}
	}
	var out io.Writer = w
	if format == config.FormatConsole {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: consoleTimeFormat, NoColor: !tty || os.Getenv("NO_COLOR") != ""}
	}
	return zerolog.New(out).Level(cfg.LogLevel()).Hook(msTime{})
}

// msTime stamps every event with the time, to the millisecond (zerolog's
// own Timestamp uses the global TimeFieldFormat, whole seconds by
// default). The console writer parses it back and keeps the fraction.
type msTime struct{}

func (msTime) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format(jsonTimeFormat))
}

// isTerminal reports whether f is a terminal (not merely a character
// device: /dev/null is one too).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// rateLogger routes go-redis's own messages into our log at warn level,
// at most one line per message (its format string) per every; the next
// line of a message says how many were left out before it
// ("suppressed"). While Redis was down, the pool's "failed to dial" came
// about 33 times a minute.
type rateLogger struct {
	l     zerolog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	seen map[string]*rateState // by format
}

type rateState struct {
	last       time.Time
	suppressed int
}

// rateLoggerMax bounds how many formats a rateLogger remembers; go-redis
// has a few dozen.
const rateLoggerMax = 256

func newRateLogger(l zerolog.Logger, every time.Duration) *rateLogger {
	return &rateLogger{l: l, every: every, now: time.Now, seen: map[string]*rateState{}}
}

// Printf implements go-redis's internal.Logging.
func (r *rateLogger) Printf(_ context.Context, format string, v ...any) {
	now := r.now()
	r.mu.Lock()
	st := r.seen[format]
	if st != nil && now.Sub(st.last) < r.every {
		st.suppressed++
		r.mu.Unlock()
		return
	}
	if st == nil {
		if len(r.seen) >= rateLoggerMax {
			clear(r.seen)
		}
		st = &rateState{}
		r.seen[format] = st
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	r.mu.Unlock()
	ev := r.l.Warn()
	if n > 0 {
		ev = ev.Int("suppressed", n)
	}
	ev.Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
