//go:build unix

package exec

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The process helpers of the sink's tests, in this package so that its
// own tests (TestCommandDiesWithItsSupervisor) and the external ones
// (exec_test) read /proc the same way.

// ProcStat returns the state and process group of pid, from /proc.
func ProcStat(pid int) (state string, pgrp int, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid pgrp ...; comm may contain spaces and
	// parentheses.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(fields[2])
	return fields[0], pgrp, err == nil
}

// Alive reports whether pid is a live process, not counting zombies (which
// init, or whatever reaps orphans here, may be slow to collect).
func Alive(pid int) bool {
	state, _, ok := ProcStat(pid)
	return ok && state != "Z"
}
