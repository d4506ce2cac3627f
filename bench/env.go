package bench

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Env describes where and with what the benchmarks ran.
type Env struct {
	GoVersion    string
	GOOS, GOARCH string
	GOMAXPROCS   int
	NumCPU       int
	CPUModel     string
	MemTotal     string
	Kernel       string
	RedisVersion string
	RedisMalloc  string
	RedisBench   string // redis-benchmark --version
	Libraries    []string
	Commit       string
}

// Libraries whose versions the report names.
var reportedModules = []string{
	"github.com/redis/go-redis/v9",
	"github.com/bsm/redislock",
	"github.com/go-redsync/redsync/v4",
	"github.com/hibiken/asynq",
	"github.com/vmihailenco/msgpack/v5",
	"github.com/alicebob/miniredis/v2",
}

// ReadEnv collects the environment.
func ReadEnv(ctx context.Context, srv *Server, repoDir string) Env {
	e := Env{GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(v)
				if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
					e.MemTotal = strconv.FormatFloat(kb/1024/1024, 'f', 1, 64) + " GiB"
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = strings.TrimSpace(string(b))
	}
	if m, err := srv.Info(ctx, "server"); err == nil {
		e.RedisVersion = m["redis_version"]
	}
	if m, err := srv.Info(ctx, "memory"); err == nil {
		e.RedisMalloc = m["mem_allocator"]
	}
	if out, err := exec.Command("redis-benchmark", "--version").Output(); err == nil {
		e.RedisBench = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, want := range reportedModules {
			for _, d := range bi.Deps {
				if d.Path == want {
					v := d.Version
					if d.Replace != nil {
						v += " => " + d.Replace.Path + " " + d.Replace.Version
					}
					e.Libraries = append(e.Libraries, d.Path+" "+v)
				}
			}
		}
	}
	if out, err := exec.Command("git", "-C", repoDir, "describe", "--always", "--dirty", "--tags").Output(); err == nil {
		e.Commit = strings.TrimSpace(string(out))
	}
	return e
}
