package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A call that went through clears a refusal only when it started after
// the last refusal was seen: one sent before the revocation and answered
// after a refused one logged the refusal cleared, then the next refusal
// again (TestDaemonRefusalRevokedLoggedOnce, under load).
func TestRefusalClearedOnlyByLaterCalls(t *testing.T) {
	r := &refusals{log: zerolog.Nop()}
	before := time.Now()
	time.Sleep(time.Millisecond)
	r.seen(opClaim, 0, errors.New("NOPERM this user has no permissions to run the 'evalsha' command"))
	r.cleared(opClaim, 0, before)
	if r.causes(opClaim) == nil {
		t.Fatal("a call started before the refusal cleared it")
	}
	r.cleared(opClaim, 0, time.Now())
	if c := r.causes(opClaim); c != nil {
		t.Fatalf("a call started after the refusal left it: %q", c)
	}
}
