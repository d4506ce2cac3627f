// Command redisinstr counts the instructions a redis-server runs for
// syncd's hot paths, under valgrind's callgrind: a figure that does not
// move with the machine's load, unlike the CPU times of benchall, so a
// change to a script can be judged on a shared 2-core VM in a minute.
//
//	cd bench && go run ./cmd/redisinstr            # every workload
//	cd bench && go run ./cmd/redisinstr -only lock1,redislock
//	cd bench && go run ./cmd/redisinstr -keep DIR  # also keep the callgrind files
//
// For each workload it starts redis-server under callgrind twice, runs
// the workload's setup in both and its measured rounds in the second
// only, and prints the difference per operation:
//
//   - pick: 2000 items on one shard (so the meta hash is a hashtable, as
//     in any deployment past 512 items a shard), 70 rounds to warm up,
//     then 100 rounds of ClaimPick of 32 + Release of those 32 as synced;
//     the operation is one item claimed and released.
//   - extend: 32 items of that shard claimed, then 100 Store.Extend calls
//     of all 32 leases with their due key, as ownership's heartbeat
//     sends them; the operation is one lease extended.
//   - lock: Store.Lock + Store.Unlock of 50 names in turn, 500 cycles; the
//     operation is one cycle.
//   - lock1: the same through a Store with auto-pipelining, whose
//     coalescer sends each lone call at once (lock.lua, then
//     unlock_batch.lua): what the Locker runs at 1 goroutine.
//   - redislock: the peer, bsm/redislock's Obtain + Release of the same
//     50 names in turn, 500 cycles; the operation is one cycle.
//   - floor: bench.FloorCycle, the least a lock with a fence from Redis's
//     clock can run (one script of TIME + SET NX PX, and the classic
//     compare-and-delete), on the same 50 names in turn, 500 cycles.
//   - lockb: the same calls from 32 goroutines at once, each on its own
//     name, 20 cycles each, through a Store with auto-pipelining, whose
//     coalescer sends them in batches (a Redis under callgrind is so
//     slow that nearly every batch carries all 32 waiting calls); the
//     operation is one cycle.
//
// It needs valgrind and redis-server on PATH. Instructions are not time,
// but on these paths (Lua, string building, command dispatch) they track
// it; read the callgrind files with callgrind_annotate for where they go
// (a redis-server built with symbols names the functions).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/bench"
	"github.com/syncd/syncd/store"
)

func main() {
	keep := flag.String("keep", "", "directory to keep the callgrind output files in")
	server := flag.String("redis-server", "redis-server", "the redis-server binary to count")
	only := flag.String("only", "", "comma-separated workloads to run (default: all)")
	flag.Parse()
	if _, err := exec.LookPath("valgrind"); err != nil {
		fmt.Fprintln(os.Stderr, "redisinstr: valgrind is not on PATH (apt-get install valgrind)")
		os.Exit(2)
	}
	for _, w := range []struct {
		name string
		ops  int // operations the measured rounds make
	}{{"pick", 100 * 32}, {"extend", 100 * 32}, {"lock", 500}, {"lock1", 500}, {"redislock", 500}, {"floor", 500}, {"lockb", lockbGoroutines * lockbCycles}} {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), w.name) {
			continue
		}
		base, err := count(*server, w.name, false, *keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "redisinstr:", err)
			os.Exit(1)
		}
		with, err := count(*server, w.name, true, *keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "redisinstr:", err)
			os.Exit(1)
		}
		fmt.Printf("%-9s %8.1fk Redis instructions per %s\n", w.name, float64(with-base)/float64(w.ops)/1000,
			map[string]string{"pick": "item claimed and released (pick 32 + release 32)",
				"extend": "item lease extended (32 per call, as ownership's heartbeat)", "lock": "lock cycle (lock + unlock)",
				"lock1": "lock cycle, auto-pipelined Store, one at a time", "redislock": "bsm/redislock cycle (Obtain + Release)",
				"floor": "fenced floor cycle (bench.FloorCycle)",
				"lockb": "lock cycle, 32 goroutines batched"}[w.name])
	}
}

var collected = regexp.MustCompile(`Collected : (\d+)`)

// count runs the workload against a redis-server under callgrind and
// returns the instructions it ran in all; measured says whether the
// measured rounds run after the setup.
func count(server, workload string, measured bool, keep string) (int64, error) {
	dir, err := os.MkdirTemp("", "redisinstr-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	port, err := bench.FreePort()
	if err != nil {
		return 0, err
	}
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out, server,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	logf, err := os.Create(filepath.Join(dir, "valgrind.log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	up := false
	for range 300 { // callgrind starts redis ~50x slower
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			up = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	if !up {
		cmd.Process.Kill()
		cmd.Wait()
		return 0, fmt.Errorf("redis-server under callgrind did not answer on %s", addr)
	}
	werr := run(ctx, addr, workload, measured)
	rdb.Shutdown(ctx) // the process exits: callgrind writes its file
	if err := cmd.Wait(); err != nil && werr == nil {
		werr = fmt.Errorf("valgrind: %w", err)
	}
	if werr != nil {
		return 0, werr
	}
	log, err := os.ReadFile(logf.Name())
	if err != nil {
		return 0, err
	}
	m := collected.FindSubmatch(log)
	if m == nil {
		return 0, fmt.Errorf("no instruction count in valgrind's log:\n%s", log)
	}
	if keep != "" {
		name := fmt.Sprintf("callgrind-%s-%s.out", workload, map[bool]string{false: "setup", true: "measured"}[measured])
		if b, err := os.ReadFile(out); err == nil {
			os.MkdirAll(keep, 0o755)
			os.WriteFile(filepath.Join(keep, name), b, 0o644)
		}
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// The batched lock workload's shape.
const (
	lockbGoroutines = 32
	lockbCycles     = 20
)

// rec is a record as syncd's workers write it.
func rec(tok store.Token, w int) *store.Record {
	return &store.Record{Version: store.RecordVersion, Token: tok, State: store.StateSyncing,
		Owner: store.Owner{Host: "bench-host", PID: 4242, Run: "benchrun01", Worker: w}}
}

// lockCycle takes name and gives it back.
func lockCycle(ctx context.Context, st *store.Store, name string, w int) error {
	tok := store.NewToken()
	res, err := st.Lock(ctx, name, rec(tok, w), 30*time.Second)
	if err != nil || !res.Acquired {
		return fmt.Errorf("lock %s: %+v %v", name, res, err)
	}
	if c, err := st.Unlock(ctx, name, tok); err != nil || c != store.Released {
		return fmt.Errorf("unlock %s: %v %v", name, c, err)
	}
	return nil
}

// run is the workload: its setup, then (measured) its rounds.
func run(ctx context.Context, addr, workload string, measured bool) error {
	if workload == "redislock" || workload == "floor" {
		return runPeer(ctx, addr, workload, measured)
	}
	st, err := store.Open(ctx, store.Config{Addrs: []string{addr}, Shards: 1, ReadTimeout: 30 * time.Second,
		AutoPipeline: workload == "lockb" || workload == "lock1"})
	if err != nil {
		return err
	}
	defer st.Close()
	hold, err := st.MarkEpoch(ctx, 0, time.Second)
	if err != nil {
		return err
	}
	time.Sleep(hold + 10*time.Millisecond)
	if workload == "lockb" {
		return runBatched(ctx, st, measured)
	}
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%07d", i)
	}
	if _, err := st.Add(ctx, ids...); err != nil {
		return err
	}
	if workload == "extend" {
		return runExtend(ctx, st, measured)
	}
	rounds, warm := 0, 0
	switch {
	case workload == "pick":
		warm = 70
		if measured {
			rounds = 100
		}
	case measured:
		rounds = 500
	}
	for r := range warm + rounds {
		if workload != "pick" {
			if err := lockCycle(ctx, st, "lk-"+strconv.Itoa(r%50), 0); err != nil {
				return err
			}
			continue
		}
		tok, res, err := pick32(ctx, st)
		if err != nil {
			return err
		}
		reqs := make([]store.ReleaseRequest, 32)
		for i, it := range res.Items {
			reqs[i] = store.ReleaseRequest{ID: it.ID, Token: tok, Kind: store.ReleaseSynced}
		}
		out, err := st.Release(ctx, 0, reqs)
		if err != nil || out[0].Code != store.Released {
			return fmt.Errorf("release: %v %v", out, err)
		}
	}
	return nil
}

// pick32 claims 32 items of shard 0 with one ClaimPick, all under one
// token, which it returns with the claim.
func pick32(ctx context.Context, st *store.Store) (store.Token, *store.ClaimPickResult, error) {
	tok := store.NewToken()
	recs := make([]*store.Record, 32)
	for i := range recs {
		recs[i] = rec(tok, i)
	}
	res, err := st.ClaimPick(ctx, store.ClaimPickParams{Shard: 0, Records: recs, TTL: 30 * time.Second})
	if err != nil || len(res.Items) != 32 {
		return tok, nil, fmt.Errorf("pick: %v %v", res, err)
	}
	return tok, res, nil
}

// runExtend is the extend workload: 32 items of shard 0 claimed, then
// (measured) 100 heartbeats of all 32 leases, each one Store.Extend call
// with the due key, as ownership's heartbeat sends it.
func runExtend(ctx context.Context, st *store.Store, measured bool) error {
	tok, res, err := pick32(ctx, st)
	if err != nil {
		return err
	}
	reqs := make([]store.ExtendRequest, 32)
	for i, it := range res.Items {
		reqs[i] = store.ExtendRequest{Key: st.Keys().Record(0, it.ID), Token: tok, Due: st.Keys().Due(0), ID: it.ID}
	}
	rounds := 1 // loads the script
	if measured {
		rounds += 100
	}
	for range rounds {
		out, err := st.Extend(ctx, 30*time.Second, 0, reqs)
		if err != nil || out[0].Code != store.ExtendOK {
			return fmt.Errorf("extend: %v %v", out, err)
		}
	}
	return nil
}

// runPeer is the redislock workload, the peer's Obtain + Release, or the
// floor workload, bench.FloorCycle, of 50 names in turn, as lock's rounds
// run (the setup loads the scripts).
func runPeer(ctx context.Context, addr, workload string, measured bool) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second})
	defer rdb.Close()
	lc := redislock.New(rdb)
	rounds := 1
	if measured {
		rounds += 500
	}
	for r := range rounds {
		if workload == "floor" {
			if ok, err := bench.FloorCycle(ctx, rdb, "lk-"+strconv.Itoa(r%50)); err != nil || !ok {
				return fmt.Errorf("floor cycle: %v %v", ok, err)
			}
			continue
		}
		l, err := lc.Obtain(ctx, "lk-"+strconv.Itoa(r%50), 30*time.Second, nil)
		if err != nil {
			return fmt.Errorf("redislock obtain: %w", err)
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("redislock release: %w", err)
		}
	}
	return nil
}

// runBatched is the lockb workload: one cycle per goroutine to load the
// scripts and warm up, then (measured) lockbCycles more each.
func runBatched(ctx context.Context, st *store.Store, measured bool) error {
	cycles := 1
	if measured {
		cycles += lockbCycles
	}
	errs := make(chan error, lockbGoroutines)
	for g := range lockbGoroutines {
		go func() {
			name := "lkb-" + strconv.Itoa(g)
			for range cycles {
				if err := lockCycle(ctx, st, name, g); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range lockbGoroutines {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
