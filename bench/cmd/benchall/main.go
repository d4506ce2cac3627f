// Command benchall runs syncd's benchmarks side by side with its peers
// and the Redis limit, on redis-servers it starts itself, and writes
// BENCHMARKS.md.
//
//	cd bench && go run ./cmd/benchall -out ../BENCHMARKS.md   # full, about 10 min
//	cd bench && go run ./cmd/benchall -quick -out /tmp/b.md   # smoke, ~1 min
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/syncd/syncd/bench"
)

func main() {
	out := flag.String("out", "BENCHMARKS.md", "write the report here")
	quick := flag.Bool("quick", false, "smoke run of about a minute: one repetition, short windows, no 1M schedule")
	reps := flag.Int("reps", 0, "repetitions of each figure (default 3, -quick 1)")
	only := flag.String("only", "", "comma-separated sections to run: "+strings.Join(bench.Sections, ","))
	profdir := flag.String("profdir", "", "keep the pprof files in this directory (default: a temporary one, removed)")
	flag.Parse()
	sections, err := bench.ParseOnly(*only)
	if err != nil {
		fail(err)
	}
	cmd := "cd bench && go run ./cmd/benchall"
	if len(os.Args) > 1 {
		cmd += " " + strings.Join(os.Args[1:], " ")
	}
	repo, _ := filepath.Abs("..")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	res, err := bench.Run(ctx, bench.Options{Quick: *quick, Reps: *reps, Only: sections, ProfDir: *profdir,
		RepoDir: repo, Command: cmd, Logf: logf})
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out, []byte(bench.Report(res)), 0o644); err != nil {
		fail(err)
	}
	logf("wrote %s (took %v)", *out, res.Took.Round(time.Second))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchall:", err)
	os.Exit(1)
}
