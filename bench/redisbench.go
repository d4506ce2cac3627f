package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// LimitCase is one redis-benchmark invocation.
type LimitCase struct {
	Name     string
	Pipeline int
	Requests int
	args     func(sha string) []string
}

// LimitRun is one result line of redis-benchmark.
type LimitRun struct {
	RPS   float64
	P50ms float64
	Args  string
	// Other is the CPU other processes used during the run, in cores
	// (machine busy time minus Redis, redis-benchmark and this process).
	Other float64
}

// LimitResults are the Redis limits measured.
type LimitResults struct {
	Cases   []LimitCase
	Runs    map[string][]LimitRun
	Clients int
}

// trivialScript is what EVALSHA runs.
const trivialScript = "return 1"

// LimitCases are the redis-benchmark cases; requests are sized for about
// two seconds each on the reference machine (scale multiplies them; the
// full run uses 0.6: a rate needs no more).
func LimitCases(scale float64) []LimitCase {
	n := func(v int) int { return max(int(float64(v)*scale), 1000) }
	set := func(string) []string { return []string{"-t", "set"} }
	eval := func(sha string) []string { return []string{"evalsha", sha, "0"} }
	return []LimitCase{
		{"SET", 1, n(150_000), set},
		{"SET", 16, n(2_000_000), set},
		{"EVALSHA (return 1)", 1, n(150_000), eval},
		{"EVALSHA (return 1)", 16, n(1_500_000), eval},
	}
}

func (c LimitCase) key() string { return c.Name + " -P " + strconv.Itoa(c.Pipeline) }

// RunLimits runs redis-benchmark for each case, reps times.
func RunLimits(ctx context.Context, srv *Server, cases []LimitCase, reps int, logf func(string, ...any)) (*LimitResults, error) {
	sha, err := srv.Client().ScriptLoad(ctx, trivialScript).Result()
	if err != nil {
		return nil, err
	}
	const clients = 50
	res := &LimitResults{Cases: cases, Runs: map[string][]LimitRun{}, Clients: clients}
	for rep := range reps {
		for _, c := range cases {
			args := []string{"-h", "127.0.0.1", "-p", srv.Port(), "-q", "-c", strconv.Itoa(clients),
				"-n", strconv.Itoa(c.Requests), "-P", strconv.Itoa(c.Pipeline)}
			args = append(args, c.args(sha)...)
			cmd := exec.CommandContext(ctx, "redis-benchmark", args...)
			h0, r0, s0, t0 := readHostCPU(), srv.CPU(), selfCPU(), time.Now()
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("redis-benchmark %s: %w", strings.Join(args, " "), err)
			}
			r, err := parseRedisBenchmark(string(out))
			if err != nil {
				return nil, fmt.Errorf("redis-benchmark %s: %w", strings.Join(args, " "), err)
			}
			r.Args = "redis-benchmark " + strings.Join(args[4:], " ")
			h1 := readHostCPU()
			child := time.Duration(0)
			if ps := cmd.ProcessState; ps != nil {
				child = ps.UserTime() + ps.SystemTime()
			}
			other := (h1.busy - h0.busy) - (srv.CPU() - r0) - (selfCPU() - s0) - child
			r.Other = max(other, 0).Seconds() / time.Since(t0).Seconds()
			logf("redis-benchmark rep %d %-20s -P %-2d %10.0f req/s p50 %.3f ms", rep+1, c.Name, c.Pipeline, r.RPS, r.P50ms)
			res.Runs[c.key()] = append(res.Runs[c.key()], r)
		}
	}
	srv.FlushAll(ctx)
	return res, nil
}

// parseRedisBenchmark reads "SET: 74962.52 requests per second, p50=0.335 msec".
func parseRedisBenchmark(out string) (LimitRun, error) {
	var r LimitRun
	lines := strings.FieldsFunc(out, func(c rune) bool { return c == '\n' || c == '\r' })
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		j := strings.Index(line, " requests per second")
		if j < 0 {
			continue
		}
		f := strings.Fields(line[:j])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		r.RPS = v
		if k := strings.Index(line, "p50="); k >= 0 {
			p := strings.TrimSuffix(strings.Fields(line[k+4:])[0], ",")
			r.P50ms, _ = strconv.ParseFloat(p, 64)
		}
		return r, nil
	}
	return r, fmt.Errorf("no 'requests per second' in output %q", out)
}
