// Command syncd is the Redis-backed data-sync daemon: run it, run batch
// passes, and inspect and administer the item set.
//
//	syncd run      -c config.yaml                 the daemon
//	syncd batch    -c config.yaml [--report F]    one pass over the item set
//	syncd status   -c config.yaml [--json]        items, owners, fences, waits
//	syncd items    add|remove -c config.yaml [ID...] [--file F|-]
//	syncd items    list -c config.yaml
//	syncd requeue  -c config.yaml [ID...] [--file F|-] [--state quarantined|backing_off]
//	                                              make items due now, clearing failures
//	syncd trigger  -c config.yaml [--reason R] [--add] ID...   sync items now
//	syncd release  -c config.yaml --force ID      admin release of a stuck claim
//	syncd validate -c config.yaml                 print the effective config, or every error
//	syncd ui       -c config.yaml [--listen A]    the operator page and the API, no daemon
//	syncd version
//
// cmd/syncd alone reads config.yaml, flags, the environment and signals,
// and wires store, ownership, engine and the sinks together; the config
// file's schema, line numbers and messages live in internal/config. It
// must not hold protocol or scheduling logic of its own: what it needs
// from a library, the library exports.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/syncd/syncd/cmd/syncd/internal/api"
)

// version is stamped by the Makefile (-X main.version=...).
var version = "dev"

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // some items failed or were quarantined; a command failed; requeue, remove, trigger or release met unknown IDs; status or items list could not show a damaged shard's items
	exitUsage  = 2 // bad config, bad input, unreachable Redis
)

// exitError carries an exit code up to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

const usage = `syncd: a Redis-backed data-sync engine

usage:
  syncd run      -c config.yaml                 run the daemon
  syncd batch    -c config.yaml [--report F] [--max-unavailable D]
                                                sync every item once, then exit
  syncd status   -c config.yaml [--json] [--watch[=2s]] [--state S] [--prefix P] [--limit N] [--cursor C]
                                                show items, owners, fences and waits
  syncd items    add|remove -c config.yaml [ID...] [--file F|-]
  syncd items    list -c config.yaml            print every item's ID
  syncd items    reconcile -c config.yaml [--force]
                                                bring the item set in line with the sources now
  syncd requeue  -c config.yaml [ID...] [--file F|-] [--state quarantined|backing_off]
                                                make items due now, clearing failures and
                                                bringing quarantined ones back
  syncd trigger  -c config.yaml [--reason R] [--add] ID...
                                                sync items now, ahead of the others (in flight: again right after)
  syncd release  -c config.yaml --force ID      delete a stuck claim and raise its fence
  syncd validate -c config.yaml                 print the effective config, or every error (offline:
                                                it reads secrets and finds programs and directories,
                                                but does not connect to Redis)
  syncd ui       -c config.yaml [--listen A]    serve the web page and the API (no daemon);
                                                A defaults to 127.0.0.1:8089
  syncd version                                 print the version

exit codes: 0 ok, 1 items failed or quarantined, or unknown IDs (requeue, items remove, trigger,
            release), or items not shown (status, items list: a damaged shard's; an err hash
            alone loses only last errors, exit 0), 2 bad config or input (nothing changed),
            unreachable Redis
`

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmds := map[string]func([]string, io.Writer, io.Writer) error{
		"run": cmdRun, "batch": cmdBatch, "status": cmdStatus, "items": cmdItems,
		"requeue": cmdRequeue, "trigger": cmdTrigger, "release": cmdRelease, "validate": cmdValidate, "ui": cmdUI,
		"version": cmdVersion,
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "syncd: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	err := cmd(args[1:], stdout, stderr)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			printErr(stderr, args[0], ee.err)
		}
		return ee.code
	}
	printErr(stderr, args[0], err)
	return exitFailed
}

// printErr writes err for an operator of the command cmd (cliText), each
// of its lines after "syncd <cmd>: ". A joined error (errors.Join) has a
// line per error, and every one says which command it is from, as git
// prefixes each line of a hint with "hint: ": a grep for "syncd trigger:"
// finds them all, and so does a reader of a journal that keeps each line
// as an entry of its own. Before, only the first line had it (an outside
// trial).
func printErr(w io.Writer, cmd string, err error) {
	for _, line := range strings.Split(cliText(err, cmd), "\n") {
		if line == "" {
			fmt.Fprintf(w, "syncd %s:\n", cmd)
			continue
		}
		fmt.Fprintf(w, "syncd %s: %s\n", cmd, line)
	}
}

// cmdVersion prints the version.
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	f := &flags{fs: flag.NewFlagSet("syncd version", flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	if err := f.parseNone(args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "syncd", version)
	return nil
}

// cliText is err's text for an operator of the command cmd (api.Plain):
// without the package names that start its wrapped parts, which say
// where in the code an error came from, not what it means (an
// operator's trial).
func cliText(err error, cmd string) string { return api.Plain(err, cmd) }
