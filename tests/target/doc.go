// Package target holds the acceptance tests of the target's flow control
// (failure classes, the fleet-wide breaker, rate limit and max_in_flight),
// run as an operator would meet them: real `syncd run` processes over a
// real redis-server, syncing into exec and http targets that go down,
// answer 503 or 429 with Retry-After, or count how many syncs reach them
// at once.
package target
