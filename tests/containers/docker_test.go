package containers

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"go.uber.org/goleak"

	"github.com/syncd/syncd/tests/testutil"
)

// Labels on everything the tests create.
const (
	labelTest = "syncd.test"
	labelPID  = "syncd.test.pid"
	testName  = "containers"
)

// labels returns the labels of this test binary's objects.
func labels() map[string]string {
	return map[string]string{labelTest: testName, labelPID: strconv.Itoa(os.Getpid())}
}

var (
	poolOnce sync.Once
	pool     *dockertest.Pool
	poolErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pool != nil {
		// The Docker client keeps idle HTTP connections (and their
		// goroutines) to the engine.
		pool.Client.HTTPClient.CloseIdleConnections()
	}
	staticSyncd.Remove()
	if code == 0 {
		if err := goleak.Find(testutil.IgnoreRedial); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// dockerPool connects to the Docker engine (DOCKER_HOST or the local
// socket) once, sweeps what dead runs left behind, and skips the test
// when there is no engine.
func dockerPool(t *testing.T) *dockertest.Pool {
	t.Helper()
	poolOnce.Do(func() {
		p, err := dockertest.NewPool("")
		if err != nil {
			poolErr = err
			return
		}
		p.Client.HTTPClient.Timeout = 2 * time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Client.PingWithContext(ctx); err != nil {
			p.Client.HTTPClient.CloseIdleConnections()
			poolErr = err
			return
		}
		p.MaxWait = 30 * time.Second
		pool = p
		poolErr = sweep(p)
	})
	if pool == nil {
		t.Skipf("no Docker engine reachable (%v): the container tests need one (DOCKER_HOST or /var/run/docker.sock)", poolErr)
	}
	if poolErr != nil {
		t.Fatalf("sweep leftovers of earlier runs: %v", poolErr)
	}
	return pool
}

// alive reports whether the process that labelled an object still runs.
func alive(pidLabel string) bool {
	pid, err := strconv.Atoi(pidLabel)
	return err == nil && testutil.Alive(pid)
}

// sweep removes the containers, networks and per-run images of test
// binaries that are gone: a run killed before its cleanup (a panic, a
// go test -timeout) leaves them behind, and dockertest has no reaper.
// Objects of a run still going (another go test) are left alone.
func sweep(p *dockertest.Pool) error {
	filter := map[string][]string{"label": {labelTest + "=" + testName}}
	cs, err := p.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: filter})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range cs {
		if !alive(c.Labels[labelPID]) {
			errs = append(errs, p.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true}))
		}
	}
	ns, err := p.Client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {labelTest + "=" + testName: true}})
	if err != nil {
		return err
	}
	for _, n := range ns {
		if !alive(n.Labels[labelPID]) {
			errs = append(errs, p.Client.RemoveNetwork(n.ID))
		}
	}
	imgs, err := p.Client.ListImages(dc.ListImagesOptions{Filters: filter})
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if pid, ok := img.Labels[labelPID]; ok && !alive(pid) {
			for _, tag := range img.RepoTags {
				errs = append(errs, p.Client.RemoveImageExtended(tag, dc.RemoveImageOptions{Force: true}))
			}
		}
	}
	return errors.Join(errs...)
}

// buildContext is a build context: files by their path in the image.
type buildContext struct {
	files map[string][]byte // path in the image (no leading /) -> content
	modes map[string]int64
	dirs  []string
}

func newContext() *buildContext {
	return &buildContext{files: map[string][]byte{}, modes: map[string]int64{}}
}

// addHostFile copies a host file (following symlinks) to path.
func (b *buildContext) addHostFile(t *testing.T, host, path string) {
	t.Helper()
	data, err := os.ReadFile(host) // follows symlinks
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(host)
	if err != nil {
		t.Fatal(err)
	}
	b.files[strings.TrimPrefix(path, "/")] = data
	b.modes[strings.TrimPrefix(path, "/")] = int64(fi.Mode().Perm())
}

// tar renders the context with a Dockerfile.
func (b *buildContext) tar(t *testing.T, dockerfile string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	add := func(name string, data []byte, mode int64) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add("Dockerfile", []byte(dockerfile), 0o644)
	for _, d := range b.dirs {
		if err := tw.WriteHeader(&tar.Header{Name: "rootfs/" + d + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now}); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(b.files))
	for n := range b.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add("rootfs/"+n, b.files[n], b.modes[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// build builds an image with the classic builder (Version left empty:
// BuildKit would want a registry for its frontend) and labels it.
func build(t *testing.T, p *dockertest.Pool, name string, ctx *bytes.Buffer, extraLabels map[string]string) {
	t.Helper()
	var out bytes.Buffer
	lbl := map[string]string{labelTest: testName}
	for k, v := range extraLabels {
		lbl[k] = v
	}
	start := time.Now()
	err := p.Client.BuildImage(dc.BuildImageOptions{
		Name:                name,
		InputStream:         ctx,
		OutputStream:        &out,
		Labels:              lbl,
		RmTmpContainer:      true,
		ForceRmTmpContainer: true,
	})
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out.String())
	}
	t.Logf("built %s in %v", name, time.Since(start).Round(time.Millisecond))
}

// lddPaths lists the libraries and the dynamic loader a binary needs.
func lddPaths(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x...)",
		// "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)"
		f := strings.Fields(sc.Text())
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				paths = append(paths, w)
			}
		}
	}
	if len(paths) == 0 {
		t.Fatalf("ldd %s listed no libraries:\n%s", bin, out)
	}
	return paths
}

const redisImage = "syncd-test/redis-scratch"

// buildRedisImage builds an image FROM scratch with the host's
// redis-server, every library ldd lists and the dynamic loader.
func buildRedisImage(t *testing.T, p *dockertest.Pool) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found on PATH: the Redis image is built from the host's (install Debian's redis-server)")
	}
	b := newContext()
	b.addHostFile(t, bin, "/usr/bin/redis-server")
	for _, lib := range lddPaths(t, bin) {
		b.addHostFile(t, lib, lib)
	}
	b.dirs = []string{"data"}
	build(t, p, redisImage+":latest", b.tar(t, `FROM scratch
COPY rootfs/ /
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server"]
CMD ["--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", "/data"]
`), nil)
	return redisImage
}

// staticSyncd builds cmd/syncd without cgo, once per run, for images
// FROM scratch.
var staticSyncd = testutil.Syncd{Flags: []string{"-trimpath"}, Env: []string{"CGO_ENABLED=0"}}

// buildSyncdImage builds an image FROM scratch with a static syncd and
// config as /config.yaml, tagged for this run (and removed with it).
func buildSyncdImage(t *testing.T, p *dockertest.Pool, config string) (repo, tag string) {
	t.Helper()
	b := newContext()
	b.addHostFile(t, staticSyncd.Path(t), "/syncd")
	b.files["config.yaml"] = []byte(config)
	b.modes["config.yaml"] = 0o644
	repo, tag = "syncd-test/syncd", strconv.Itoa(os.Getpid())
	build(t, p, repo+":"+tag, b.tar(t, `FROM scratch
COPY rootfs/ /
ENTRYPOINT ["/syncd"]
CMD ["run", "-c", "/config.yaml"]
`), map[string]string{labelPID: strconv.Itoa(os.Getpid())})
	t.Cleanup(func() { p.Client.RemoveImageExtended(repo+":"+tag, dc.RemoveImageOptions{Force: true}) })
	return repo, tag
}

// run starts a container on the default bridge, labelled, and removes it
// in t's cleanup.
func run(t *testing.T, p *dockertest.Pool, opts *dockertest.RunOptions) *dockertest.Resource {
	t.Helper()
	opts.Labels = labels()
	r, err := p.RunWithOptions(opts, func(hc *dc.HostConfig) {
		hc.AutoRemove = false
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
	})
	if err != nil {
		t.Fatalf("run %s:%s: %v", opts.Repository, opts.Tag, err)
	}
	t.Cleanup(func() {
		if err := p.Purge(r); err != nil {
			t.Errorf("remove container %s: %v", r.Container.Name, err)
		}
	})
	return r
}

// logs returns a container's output.
func logs(t *testing.T, p *dockertest.Pool, r *dockertest.Resource) string {
	t.Helper()
	var out bytes.Buffer
	err := p.Client.Logs(dc.LogsOptions{Container: r.Container.ID, OutputStream: &out, ErrorStream: &out,
		Stdout: true, Stderr: true, RawTerminal: false})
	if err != nil {
		return "logs: " + err.Error()
	}
	return out.String()
}

// privateNetwork creates a labelled bridge network, removed in t's
// cleanup.
func privateNetwork(t *testing.T, p *dockertest.Pool) *dockertest.Network {
	t.Helper()
	name := fmt.Sprintf("syncd-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	n, err := p.CreateNetwork(name, func(c *dc.CreateNetworkOptions) {
		c.Driver = "bridge"
		c.Labels = labels()
	})
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() {
		if err := p.RemoveNetwork(n); err != nil {
			t.Errorf("remove network %s: %v", name, err)
		}
	})
	return n
}

// connect attaches a running container to n, with aliases.
func connect(t *testing.T, p *dockertest.Pool, n *dockertest.Network, r *dockertest.Resource, aliases ...string) {
	t.Helper()
	err := p.Client.ConnectNetwork(n.Network.ID, dc.NetworkConnectionOptions{Container: r.Container.ID,
		EndpointConfig: &dc.EndpointConfig{Aliases: aliases}})
	if err != nil {
		t.Fatalf("connect %s to %s: %v", r.Container.Name, n.Network.Name, err)
	}
}

func disconnect(t *testing.T, p *dockertest.Pool, n *dockertest.Network, r *dockertest.Resource) {
	t.Helper()
	err := p.Client.DisconnectNetwork(n.Network.ID, dc.NetworkConnectionOptions{Container: r.Container.ID, Force: true})
	if err != nil {
		t.Fatalf("disconnect %s from %s: %v", r.Container.Name, n.Network.Name, err)
	}
}

// bridgeGateway returns the default bridge's gateway address, as a
// container on it sees it: the host. (The bridge's IPAM config need not
// name it.)
func bridgeGateway(t *testing.T, r *dockertest.Resource) string {
	t.Helper()
	if n, ok := r.Container.NetworkSettings.Networks["bridge"]; ok && n.Gateway != "" {
		return n.Gateway
	}
	if g := r.Container.NetworkSettings.Gateway; g != "" {
		return g
	}
	t.Fatalf("container %s has no gateway on the default bridge", r.Container.Name)
	return ""
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(cmd.Process.Pid)
}

// Leftovers of a run that died (its pid is gone) are swept; objects of a
// live run are not.
func TestSweepRemovesLeftovers(t *testing.T) {
	p := dockerPool(t)
	repo := buildRedisImage(t, p)
	dead := map[string]string{labelTest: testName, labelPID: deadPID(t)}
	n, err := p.Client.CreateNetwork(dc.CreateNetworkOptions{Name: fmt.Sprintf("syncd-test-leftover-%d", os.Getpid()), Driver: "bridge", Labels: dead})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Client.CreateContainer(dc.CreateContainerOptions{Config: &dc.Config{Image: repo + ":latest", Labels: dead}})
	if err != nil {
		t.Fatal(err)
	}
	live := privateNetwork(t, p)
	if err := sweep(p); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Client.NetworkInfo(n.ID); err == nil {
		p.Client.RemoveNetwork(n.ID)
		t.Error("a dead run's network survived the sweep")
	}
	if _, err := p.Client.InspectContainer(c.ID); err == nil {
		p.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true})
		t.Error("a dead run's container survived the sweep")
	}
	if _, err := p.Client.NetworkInfo(live.Network.ID); err != nil {
		t.Errorf("the sweep removed a live run's network: %v", err)
	}
}
