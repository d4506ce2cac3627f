package bench

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// syncdPrefix marks the product's frames in a profile; benchPrefix, this
// harness's, which are not the product's.
const (
	syncdPrefix = "github.com/syncd/syncd/"
	benchPrefix = "github.com/syncd/syncd/bench"
)

func isProduct(fn string) bool {
	return strings.HasPrefix(fn, syncdPrefix) && !strings.HasPrefix(fn, benchPrefix)
}

// CPUProfile is a CPU profile of one benchmark run, summarised.
type CPUProfile struct {
	Path  string
	Total int64 // ns of CPU sampled
	Ops   int64 // operations (cycles, items) done while profiling
	// Flat is the top functions by own time; Cum the product's functions
	// (and a few groups) by time including callees.
	Flat, Cum []FuncShare
}

// FuncShare is one function's share of a profile.
type FuncShare struct {
	Name  string
	Value int64
	Frac  float64
}

// ProfileCPU runs f under the CPU profiler, writes the profile to path
// and summarises it. f returns how many operations it did.
func ProfileCPU(path string, f func() int64) (*CPUProfile, error) {
	fh, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, err
	}
	ops := f()
	pprof.StopCPUProfile()
	fh.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := profile.Parse(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	idx := len(p.SampleType) - 1 // cpu nanoseconds
	out := &CPUProfile{Path: path, Ops: ops}
	flat := map[string]int64{}
	cum := map[string]int64{}
	for _, s := range p.Sample {
		v := s.Value[idx]
		out.Total += v
		seen := map[string]bool{}
		for i, loc := range s.Location {
			for j, ln := range loc.Line {
				name := ln.Function.Name
				if i == 0 && j == 0 {
					flat[name] += v
				}
				for _, key := range cumKeys(name) {
					if !seen[key] {
						seen[key] = true
						cum[key] += v
					}
				}
			}
		}
	}
	out.Flat = top(flat, out.Total, 15)
	out.Cum = top(cum, out.Total, 25)
	return out, nil
}

// cumKeys are the rows a frame counts toward in the cumulative table:
// product functions by name, and coarse groups for the rest.
func cumKeys(name string) []string {
	switch {
	case isProduct(name):
		return []string{strings.TrimPrefix(name, syncdPrefix)}
	case name == "runtime.gcBgMarkWorker" || name == "runtime.gcAssistAlloc" || name == "runtime.bgsweep":
		return []string{"[runtime: garbage collection]"}
	case name == "runtime.mallocgc":
		return []string{"[runtime: mallocgc]"}
	case name == "runtime.schedule" || name == "runtime.findRunnable":
		return []string{"[runtime: scheduler]"}
	case name == "syscall.Syscall" || name == "syscall.RawSyscall6" || name == "internal/runtime/syscall.Syscall6" || name == "syscall.Syscall6":
		return []string{"[syscalls: socket reads and writes]"}
	case name == "crypto/rand.Read":
		return []string{"[crypto/rand.Read]"}
	case strings.HasPrefix(name, "github.com/redis/go-redis/v9.(*baseClient)._process") ||
		strings.HasPrefix(name, "github.com/redis/go-redis/v9.(*baseClient).generalProcessPipeline"):
		return []string{"[go-redis: send command, read reply]"}
	case strings.HasPrefix(name, "time.AfterFunc") || strings.HasPrefix(name, "time.(*Timer)"):
		return []string{"[time: timers]"}
	case strings.HasPrefix(name, "context.WithCancel") || strings.HasPrefix(name, "context.(*cancelCtx)"):
		return []string{"[context: cancel contexts]"}
	}
	return nil
}

func top(m map[string]int64, total int64, n int) []FuncShare {
	var out []FuncShare
	for k, v := range m {
		out = append(out, FuncShare{Name: k, Value: v, Frac: float64(v) / float64(max(total, 1))})
	}
	slices.SortFunc(out, func(a, b FuncShare) int {
		if a.Value != b.Value {
			if a.Value > b.Value {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out[:min(n, len(out))]
}

// AllocProfile attributes a run's heap allocations to call sites.
type AllocProfile struct {
	Ops             int64
	Objects, Bytes  int64
	Sites           []AllocSite // by the innermost product frame
	Leaves          []AllocSite // by the allocating function
	ProductObjects  int64       // objects with a product frame on the stack
	OutsideObjects  int64
	OutsideExamples []AllocSite
}

// AllocSite is allocations per operation at one place.
type AllocSite struct {
	Site            string
	Objects, Bytes  int64
	PerOp, BytesPer float64
}

// ProfileAllocs records every allocation (MemProfileRate = 1) while f
// runs and attributes them; with a path, it also writes the profile
// there. f returns how many operations it did.
func ProfileAllocs(path string, f func() int64) (*AllocProfile, error) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	runtime.GC()
	base, err := allocsSnapshot()
	if err != nil {
		runtime.MemProfileRate = old
		return nil, err
	}
	ops := f()
	runtime.GC() // publish the last allocations into the profile
	after, err := allocsSnapshot()
	runtime.MemProfileRate = old
	if err != nil {
		return nil, err
	}
	base.Scale(-1)
	merged, err := profile.Merge([]*profile.Profile{after, base})
	if err != nil {
		return nil, err
	}
	if path != "" {
		fh, err := os.Create(path)
		if err == nil {
			merged.Write(fh)
			fh.Close()
		}
	}
	oi, bi := -1, -1
	for i, st := range merged.SampleType {
		switch st.Type {
		case "alloc_objects":
			oi = i
		case "alloc_space":
			bi = i
		}
	}
	if oi < 0 || bi < 0 {
		return nil, fmt.Errorf("bench: allocs profile without alloc_objects/alloc_space")
	}
	out := &AllocProfile{Ops: ops}
	sites := map[string][2]int64{}
	leaves := map[string][2]int64{}
	outside := map[string][2]int64{}
	for _, s := range merged.Sample {
		o, b := s.Value[oi], s.Value[bi]
		if o == 0 && b == 0 {
			continue
		}
		site, leaf, profiler := "", "", false
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				name := ln.Function.Name
				if strings.HasPrefix(name, "runtime/pprof.") || strings.HasPrefix(name, "github.com/google/pprof/") {
					profiler = true
				}
				if leaf == "" && !strings.HasPrefix(name, "runtime.") {
					leaf = name
				}
				if site == "" && isProduct(name) {
					site = fmt.Sprintf("%s:%d", strings.TrimPrefix(name, syncdPrefix), ln.Line)
				}
			}
		}
		if profiler { // the profile snapshots themselves
			continue
		}
		out.Objects += o
		out.Bytes += b
		if leaf == "" {
			leaf = "runtime"
		}
		l := leaves[leaf]
		leaves[leaf] = [2]int64{l[0] + o, l[1] + b}
		if site == "" {
			out.OutsideObjects += o
			x := outside[leaf]
			outside[leaf] = [2]int64{x[0] + o, x[1] + b}
			continue
		}
		out.ProductObjects += o
		x := sites[site]
		sites[site] = [2]int64{x[0] + o, x[1] + b}
	}
	out.Sites = allocTop(sites, ops, 20)
	out.Leaves = allocTop(leaves, ops, 15)
	out.OutsideExamples = allocTop(outside, ops, 5)
	return out, nil
}

func allocTop(m map[string][2]int64, ops int64, n int) []AllocSite {
	var out []AllocSite
	for k, v := range m {
		if v[0] <= 0 {
			continue
		}
		out = append(out, AllocSite{Site: k, Objects: v[0], Bytes: v[1],
			PerOp: float64(v[0]) / float64(max(ops, 1)), BytesPer: float64(v[1]) / float64(max(ops, 1))})
	}
	slices.SortFunc(out, func(a, b AllocSite) int {
		if a.Objects != b.Objects {
			if a.Objects > b.Objects {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Site, b.Site)
	})
	return out[:min(n, len(out))]
}

func allocsSnapshot() (*profile.Profile, error) {
	var buf bytes.Buffer
	if err := pprof.Lookup("allocs").WriteTo(&buf, 0); err != nil {
		return nil, err
	}
	return profile.Parse(&buf)
}
