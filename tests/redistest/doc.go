// Package redistest starts real redis-server processes for tests: single
// servers, replicas, Sentinel groups and Redis Clusters, each on free
// loopback ports with a data directory from t.TempDir. There are no mocks;
// faults are real signals (Kill, Pause, Resume) and real restarts.
//
// Every process is killed and reaped in the test's cleanup, and dies with
// the test binary if cleanup never runs (Pdeathsig), so tests stay free of
// leaked goroutines and processes. Everything is safe for parallel tests.
// It needs Linux and Debian's redis-server and redis-tools (redis-cli) on
// PATH; without redis-server, Start fails the test with a message saying
// so.
//
// A store test against one server that must keep its data over a crash:
//
//	func TestSurvivesCrash(t *testing.T) {
//		t.Parallel()
//		srv := redistest.Start(t, &redistest.Options{AOF: true})
//		rdb := srv.Client(t)
//		if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
//			t.Fatal(err)
//		}
//		srv.Kill(t)    // SIGKILL, like a crash
//		srv.Restart(t) // same port and dir; returns once loaded
//		got, err := rdb.Get(t.Context(), "k").Result()
//		// ...
//	}
//
// A failover test:
//
//	master := redistest.Start(t, nil)
//	redistest.Start(t, &redistest.Options{ReplicaOf: master})
//	sentinels := redistest.StartSentinels(t, master, 3, "mymaster")
//	master.Kill(t)
//	addr := sentinels.WaitForMaster(t, "mymaster", master.Addr(), 30*time.Second)
//
// and against a cluster:
//
//	cluster := redistest.StartCluster(t, 3, 1)
//	rdb := cluster.Client(t)
//	cluster.Masters(t)[0].Kill(t)
//	cluster.WaitHealthy(t, 30*time.Second) // a replica took over
//
// Timings on a small machine: a server starts in tens of milliseconds,
// sentinels need 2-3 s to find each other, a cluster forms in 1-3 s, and
// both Sentinel and Cluster failovers take a few seconds after a kill.
package redistest
