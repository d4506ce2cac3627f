// Package topology tests syncd against real Redis topologies and their
// faults, with real redis-server processes (see tests/redistest):
//
//   - Sentinel: a primary, one replica and three sentinels under claim
//     load; the primary is killed (with the replica in sync, and with the
//     replica lagging) with and without ownership.Config.MinReplicas, and
//     the test counts acknowledged claims that the failover lost and
//     overlapping claims that a fencing check would have accepted.
//   - Redis Cluster: three masters with a replica each under engine load
//     with a fence-checking sink; a master is killed and a slot range is
//     resharded while items sync; no CROSSSLOT error, no accepted overlap,
//     every item keeps syncing.
//   - Memory pressure: each maxmemory-policy is warned about (or refused
//     with RefuseEviction) except noeviction.
//   - Security: an ACL user limited to the key prefix and the commands
//     syncd needs (and a check that each of them is needed), TLS with a
//     test CA and client certificates, and passwords kept out of every
//     log line, error and validate output.
//
// The figures these tests measured are in RELIABILITY-topologies.md.
package topology
