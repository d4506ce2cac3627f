//go:build unix

package exec_test

import (
	"context"
	"errors"
	"fmt"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/syncd/syncd/sinks"
	execsink "github.com/syncd/syncd/sinks/exec"
)

// TestExitCodes: the exit status decides the class of the error, through
// the defaults and Config.ExitCodes, and the error keeps its text.
func TestExitCodes(t *testing.T) {
	override := map[int]sinks.Class{1: sinks.ClassTarget, execsink.ExitUnavailableDefault: sinks.ClassItem}
	tests := []struct {
		name  string
		codes map[int]sinks.Class
		exit  int
		class sinks.Class
		text  string
	}{
		{"tempfail", nil, 75, sinks.ClassTarget, `exec: item "a": target unavailable: exit status 75; stderr: "oops"`},
		{"dataerr", nil, 65, sinks.ClassPermanent, `exec: item "a": permanent: exit status 65; stderr: "oops"`},
		{"stale", nil, 79, sinks.ClassStale, `exec: item "a": exit status 79; stderr: "oops": sinks: stale fence`},
		{"other", nil, 1, sinks.ClassItem, `exec: item "a": exit status 1; stderr: "oops"`},
		{"max", nil, 255, sinks.ClassItem, `exec: item "a": exit status 255; stderr: "oops"`},
		{"override/1", override, 1, sinks.ClassTarget, `exec: item "a": target unavailable: exit status 1; stderr: "oops"`},
		{"override/75", override, 75, sinks.ClassItem, `exec: item "a": exit status 75; stderr: "oops"`},
		{"override/65", override, 65, sinks.ClassPermanent, `exec: item "a": permanent: exit status 65; stderr: "oops"`},
		{"override/stale", map[int]sinks.Class{3: sinks.ClassStale}, 3, sinks.ClassStale, `exec: item "a": exit status 3; stderr: "oops": sinks: stale fence`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, execsink.Config{
				Command:   []string{"sh", "-c", fmt.Sprintf("echo oops >&2; exit %d", tt.exit)},
				ExitCodes: tt.codes,
			})
			err := s.Sync(t.Context(), sinks.Item{ID: "a"})
			class, after := sinks.Classify(err)
			if class != tt.class || after != 0 {
				t.Errorf("Classify(%v) = %v, %v, want %v, 0", err, class, after, tt.class)
			}
			if err == nil || err.Error() != tt.text {
				t.Errorf("Sync = %v, want %q", err, tt.text)
			}
			var ee *osexec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tt.exit {
				t.Errorf("Sync = %v, want an ExitError with code %d", err, tt.exit)
			}
		})
	}
}

// TestExitCodesSignal: a command killed by a signal has no exit status, so
// no class, even with the shell's 128+n mapped.
func TestExitCodesSignal(t *testing.T) {
	s := newSink(t, execsink.Config{
		Command:   []string{"sh", "-c", "kill -TERM $$"},
		ExitCodes: map[int]sinks.Class{128 + 15: sinks.ClassTarget, 15: sinks.ClassTarget},
	})
	err := s.Sync(t.Context(), sinks.Item{ID: "a"})
	if class, _ := sinks.Classify(err); class != sinks.ClassItem {
		t.Errorf("Classify(%v) = %v, want item", err, class)
	}
	if want := `exec: item "a": signal: terminated`; err == nil || err.Error() != want {
		t.Errorf("Sync = %v, want %q", err, want)
	}
}

// trapScript exits 75, a target failure, on SIGTERM, once it said it is
// ready.
const trapScript = `trap 'exit 75' TERM; sleep 30 & echo "$$" > "$READY"; wait`

// TestExitCodesStopped: a command stopped by the sink, on its timeout or
// its context, has an ordinary error whatever status it then exits with.
func TestExitCodesStopped(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		ready, lines := fifo(t, t.TempDir())
		s := newSink(t, execsink.Config{
			Command: []string{"sh", "-c", trapScript},
			Env:     []string{"READY=" + ready},
			Timeout: 2 * time.Second, // time enough to start on a busy machine
		})
		done := make(chan error, 1)
		go func() { done <- s.Sync(t.Context(), sinks.Item{ID: "a"}) }()
		awaitLine(t, lines)
		err := <-done
		if class, _ := sinks.Classify(err); class != sinks.ClassItem || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Classify(%v) = %v, want a timeout of class item", err, class)
		}
		if err == nil || !strings.HasSuffix(err.Error(), ": sent SIGTERM: exit status 75") {
			t.Errorf("Sync = %v, want the command's exit status 75 after SIGTERM", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ready, lines := fifo(t, t.TempDir())
		s := newSink(t, execsink.Config{Command: []string{"sh", "-c", trapScript}, Env: []string{"READY=" + ready}})
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		done := make(chan error, 1)
		go func() { done <- s.Sync(ctx, sinks.Item{ID: "a"}) }()
		awaitLine(t, lines)
		cause := errors.New("lease lost")
		cancel(cause)
		err := <-done
		if class, _ := sinks.Classify(err); class != sinks.ClassItem || !errors.Is(err, cause) {
			t.Errorf("Classify(%v) = %v, want the cause, of class item", err, class)
		}
		if err == nil || !strings.HasSuffix(err.Error(), ": sent SIGTERM: exit status 75") {
			t.Errorf("Sync = %v, want the command's exit status 75 after SIGTERM", err)
		}
	})
}

func TestExitCodesDefault(t *testing.T) {
	want := map[int]sinks.Class{75: sinks.ClassTarget, 65: sinks.ClassPermanent, 79: sinks.ClassStale}
	got := execsink.ExitCodesDefault()
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("ExitCodesDefault (-got +want):\n%s", diff)
	}
	got[75] = sinks.ClassItem
	if execsink.ExitCodesDefault()[75] != sinks.ClassTarget {
		t.Error("ExitCodesDefault returned a shared map")
	}
	if got := (execsink.Config{}).WithDefaults().ExitCodes; got != nil {
		t.Errorf("WithDefaults().ExitCodes = %v, want nil: New merges the defaults", got)
	}
}

func TestValidateExitCodes(t *testing.T) {
	ok := execsink.Config{Command: []string{"true"}, ExitCodes: map[int]sinks.Class{
		1: sinks.ClassTarget, 75: sinks.ClassItem, 65: sinks.ClassPermanent, 255: sinks.ClassStale,
	}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate = %v, want nil", err)
	}
	bad := execsink.Config{Command: []string{"true"}, ExitCodes: map[int]sinks.Class{
		256: sinks.ClassTarget, 0: sinks.ClassTarget, -1: sinks.ClassItem,
		3: sinks.ClassNone, 4: sinks.Class(9),
	}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate = nil")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"exec: exit_codes: status -1: must be 1 to 255",
		"exec: exit_codes: status 0: must be 1 to 255",
		"exec: exit_codes: status 3: class must be item, target, permanent or stale, got none (0)",
		"exec: exit_codes: status 4: class must be item, target, permanent or stale, got unknown (9)",
		"exec: exit_codes: status 256: must be 1 to 255",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Validate (-got +want):\n%s", diff)
	}
	if _, err := execsink.New(bad, zerolog.Nop()); err == nil {
		t.Error("New succeeded, want an error")
	}
}
