package fault

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/testutil"
)

var (
	// syncd builds the syncd binary, once, for the tests that run it;
	// with -race when SYNCD_FAULT_RACE=1.
	syncd testutil.Syncd
	// trialsEnv is SYNCD_FAULT_TRIALS, 0 when unset.
	trialsEnv int
	// reportPath is SYNCD_FAULT_REPORT, "" when unset.
	reportPath string
)

func TestMain(m *testing.M) {
	if v := os.Getenv("SYNCD_FAULT_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "SYNCD_FAULT_TRIALS=%q: want a positive number\n", v)
			os.Exit(2)
		}
		trialsEnv = n
	}
	reportPath = os.Getenv("SYNCD_FAULT_REPORT")

	if os.Getenv("SYNCD_FAULT_RACE") == "1" {
		syncd.Flags = []string{"-race"}
	}
	// The scenarios kill servers on purpose.
	goleak.VerifyTestMain(m, testutil.IgnoreRedial, goleak.Cleanup(func(code int) {
		syncd.Remove()
		os.Exit(code)
	}))
}

// trials is how many trials a scenario variant runs: SYNCD_FAULT_TRIALS
// when set, def otherwise.
func trials(def int) int {
	if trialsEnv > 0 {
		return trialsEnv
	}
	return def
}

// processTest marks a test that starts redis-server and syncd processes.
func processTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts redis-server and syncd daemons; skipped with -short")
	}
	t.Parallel()
}
