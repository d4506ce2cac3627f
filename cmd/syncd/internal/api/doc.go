// Package api serves syncd's JSON API under /api/v1 (the contract is in
// README.md's "HTTP API" section): reads of the summary, the items (by
// state and ID prefix, longest waiting first, paged by cursor), one item
// with its last errors, the daemons and the target, which need no token;
// and the actions (trigger, requeue, force release), which need the
// bearer token and are refused across origins.
//
// Every read has a bounded cost whatever the item set's size: it goes
// through store.Counts, store.ListPage, store.Item and store.Daemons,
// which read the per-shard indexes in a fixed number of round trips.
// `syncd status` reads through ReadSummary and store.ListPage too, so it
// and the page always agree.
package api
