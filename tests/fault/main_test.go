package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

var (
	// syncdBin is the syncd binary built by TestMain.
	syncdBin string
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

	dir, err := os.MkdirTemp("", "syncd-fault")
	if err != nil {
		panic(err)
	}
	syncdBin = filepath.Join(dir, "syncd")
	args := []string{"build", "-o", syncdBin}
	if os.Getenv("SYNCD_FAULT_RACE") == "1" {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "../../cmd/syncd")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build syncd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// go-redis keeps a dial-retry goroutine for up to a second after a
		// server it talked to died; the scenarios kill servers on purpose.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
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
