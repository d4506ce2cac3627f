package redistest

import (
	"errors"
	"net"
	"strconv"
	"sync"
)

const (
	// clusterBusOffset is how far above its client port a cluster node
	// listens for the cluster bus (Redis's fixed default).
	clusterBusOffset = 10000
	// maxClusterPort keeps a cluster node's bus port (port+10000) well
	// inside the valid range.
	maxClusterPort = 55000
	// portTries bounds the search for a free port.
	portTries = 200
)

// reserved holds every port (client and cluster bus) handed to a Server of
// this process and not yet released. The kernel alone cannot tell us about
// a port whose server a test has killed and will restart, so without this
// set a parallel test could start a server on it in the meantime.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// reservePort finds a free loopback port and reserves it. For a cluster
// node it also reserves the bus port and keeps the port below
// maxClusterPort. Another process can still take the port before
// redis-server binds it; Start handles that by retrying.
func reservePort(cluster bool) (int, error) {
	reserved.Lock()
	defer reserved.Unlock()
	for range portTries {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		if reserved.ports[port] {
			continue
		}
		if !cluster {
			reserved.ports[port] = true
			return port, nil
		}
		bus := port + clusterBusOffset
		if port >= maxClusterPort || reserved.ports[bus] || !canBind(bus) {
			continue
		}
		reserved.ports[port] = true
		reserved.ports[bus] = true
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port found")
}

// releasePort undoes reservePort.
func releasePort(port int, cluster bool) {
	reserved.Lock()
	defer reserved.Unlock()
	delete(reserved.ports, port)
	if cluster {
		delete(reserved.ports, port+clusterBusOffset)
	}
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// canBind reports whether 127.0.0.1:port is free right now.
func canBind(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
