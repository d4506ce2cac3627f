// Package containers runs syncd and Redis in Docker containers, built
// locally from the host's binaries (no registry is needed): Redis from a
// FROM scratch image holding the host's redis-server and the libraries
// ldd lists, syncd from a static build of cmd/syncd. Three daemons share
// a Redis on a private network; one is cut off from it for longer than
// its ttl and reconnected, while an HTTP fencing checker on the host
// records every sync and checks that fences per item never go down and
// that no two claims' writes overlap.
//
// The tests skip, saying why, when no Docker engine is reachable. Every
// container, network and image they make carries the label
// syncd.test=containers and the test binary's pid; leftovers of a run
// that died are removed at the next start (dockertest has no reaper).
package containers
