// Command runner runs one sync through the exec sink, as syncd would, and
// prints its outcome. TestSyncdKilled kills it with SIGKILL while the
// command runs.
//
//	runner GRACE COMMAND [ARG...]
//
// Variables of its environment whose names start with TEST_ are passed to
// the command through Config.Env.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: runner GRACE COMMAND [ARG...]")
		os.Exit(2)
	}
	grace, err := time.ParseDuration(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TEST_") {
			env = append(env, kv)
		}
	}
	logger := zerolog.New(os.Stderr).Level(zerolog.DebugLevel)
	s, err := execsink.New(execsink.Config{Command: os.Args[2:], Env: env, Grace: grace}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(s.Sync(context.Background(), sinks.Item{ID: "a", Fence: 1, Owner: "runner", Attempt: 1}))
}
