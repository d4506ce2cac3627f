package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelReadyTimeout bounds how long StartSentinels waits for the
// sentinels to find the master, its replicas and each other. Sentinels
// announce themselves every 2 s, so this is usually done in 2-3 s.
const sentinelReadyTimeout = 30 * time.Second

// Sentinels is a group of Redis Sentinel processes monitoring one master,
// started by StartSentinels.
type Sentinels struct {
	servers []*Server
}

// StartSentinels starts n sentinels (redis-server --sentinel) that monitor
// master under masterName with quorum n/2+1, down-after-milliseconds 1000,
// failover-timeout 5000 and parallel-syncs 1, using master's password. It
// returns once every sentinel sees the master as up, knows all of the
// master's currently connected replicas and knows the other n-1
// sentinels, so that a failover can start as soon as the master fails.
// Start the replicas before the sentinels.
func StartSentinels(t testing.TB, master *Server, n int, masterName string) *Sentinels {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartSentinels: n = %d, want at least 1", n)
	}
	m, err := info(master.Addr(), master.password, adminTimeout, "replication")
	if err != nil {
		t.Fatalf("redistest: StartSentinels: master %s: %v", master.Addr(), err)
	}
	replicas, _ := strconv.Atoi(m["connected_slaves"])

	name := quote(masterName)
	conf := []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, master.Port(), n/2+1),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", name),
		fmt.Sprintf("sentinel failover-timeout %s 5000", name),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
	}
	if master.password != "" {
		conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", name, quote(master.password)))
	}
	s := &Sentinels{}
	for range n {
		s.servers = append(s.servers, start(t, Options{}, conf))
	}

	err = poll(sentinelReadyTimeout, func() (bool, string) {
		for _, sn := range s.servers {
			v, err := do(sn.Addr(), "", adminTimeout, "SENTINEL", "MASTER", masterName)
			if err != nil {
				return false, fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
			}
			mm := pairs(v)
			slaves, _ := strconv.Atoi(mm["num-slaves"])
			others, _ := strconv.Atoi(mm["num-other-sentinels"])
			if mm["flags"] != "master" || slaves < replicas || others != n-1 {
				return false, fmt.Sprintf("sentinel %s: flags=%s num-slaves=%d (want %d) num-other-sentinels=%d (want %d)",
					sn.Addr(), mm["flags"], slaves, replicas, others, n-1)
			}
			v, err = do(sn.Addr(), "", adminTimeout, "SENTINEL", "REPLICAS", masterName)
			if err != nil {
				return false, fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
			}
			list, _ := v.([]any)
			up := 0
			for _, r := range list {
				if pairs(r)["flags"] == "slave" {
					up++
				}
			}
			if up < replicas {
				return false, fmt.Sprintf("sentinel %s: %d of %d replicas up", sn.Addr(), up, replicas)
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("redistest: StartSentinels %q: %v\n%s", masterName, err, s.tails())
	}
	return s
}

// Addrs returns the sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	addrs := make([]string, len(s.servers))
	for i, sn := range s.servers {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Servers returns the sentinel processes, for tests that kill, pause or
// restart sentinels. A restarted sentinel keeps the state it wrote to its
// config file.
func (s *Sentinels) Servers() []*Server {
	return append([]*Server(nil), s.servers...)
}

// WaitForMaster waits until every running, unpaused sentinel reports the
// same master for masterName and that master is not notAddr, and returns
// its address. Pass the old master's address after a fault to wait for
// the failover. It fails the test, with the sentinels' logs, after
// timeout.
func (s *Sentinels) WaitForMaster(t testing.TB, masterName, notAddr string, timeout time.Duration) string {
	t.Helper()
	var addr string
	err := poll(timeout, func() (bool, string) {
		var seen []string
		addr = ""
		for _, sn := range s.servers {
			if !sn.answering() {
				continue
			}
			v, err := do(sn.Addr(), "", adminTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
			if err != nil {
				return false, fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
			}
			a, _ := v.([]any)
			if len(a) != 2 {
				return false, fmt.Sprintf("sentinel %s: no master %q", sn.Addr(), masterName)
			}
			host, _ := a[0].(string)
			port, _ := a[1].(string)
			got := net.JoinHostPort(host, port)
			seen = append(seen, sn.Addr()+"->"+got)
			if got == notAddr || (addr != "" && got != addr) {
				return false, strings.Join(seen, " ")
			}
			addr = got
		}
		if addr == "" {
			return false, "no sentinel answering"
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("redistest: WaitForMaster %q (not %s): %v\n%s", masterName, notAddr, err, s.tails())
	}
	return addr
}

func (s *Sentinels) tails() string {
	var b strings.Builder
	for _, sn := range s.servers {
		fmt.Fprintf(&b, "--- sentinel %s\n%s", sn.Addr(), sn.LogTail(15))
	}
	return b.String()
}
