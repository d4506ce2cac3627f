package ownership

import (
	"context"
	"errors"
	"strconv"

	"github.com/syncd/syncd/store"
)

// Items whose state in Redis is damaged: a claim that finds one takes it
// out of line for good (quarantine, with why as its error), logs it once
// and counts it, and no sink ever sees it.

// shownID is an item id read back from Redis as it may be logged:
// quoted, and cut to 64 bytes, so a planted id can neither write escape
// sequences to a terminal nor make a 400 KB log line.
func shownID(id string) string {
	if len(id) > 64 {
		return strconv.Quote(id[:64]) + "..."
	}
	return strconv.Quote(id)
}

// quarantineBadIDs quarantines the items c claimed whose ids are not
// valid, or that are in another shard than their id's (planted there by
// hand: a second copy of an item, whose claims would not exclude its
// own), with the reason as their error, and logs each once (the id
// shown, never raw) and counts it (Stats.DamagedIDs, Stats.WrongShard).
// An item whose release finds the claim gone (a lost reply that was not
// ours) is left to the claim that takes it next.
func (m *Manager) quarantineBadIDs(c *claim, bad []store.ItemClaim) {
	reqs := make([]store.ReleaseRequest, len(bad))
	home := make([]int, len(bad)) // the id's own shard when the id is valid, else -1
	for i, r := range bad {
		reqs[i] = store.ReleaseRequest{ID: r.ID, Token: c.tok, Kind: store.ReleaseQuarantine}
		home[i] = -1
		reason := "invalid"
		var ie *store.IDError
		err := store.ValidateID(r.ID)
		switch {
		case errors.As(err, &ie):
			reason = ie.Reason
		case err == nil:
			home[i] = m.st.Keys().Shard(r.ID)
			reqs[i].Error = wrongShardError(c.shard, home[i])
			continue
		}
		reqs[i].Error = "item id is not valid (" + reason + "): never synced; remove it with syncd items remove"
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Heartbeat)
	defer cancel()
	res, err := m.st.Release(ctx, c.shard, reqs)
	if err != nil {
		m.log.Warn().Err(err).Int(keyShard, c.shard).Int("items", len(bad)).
			Msg("quarantine items whose ids are not valid, or not of their shard; their claims expire by themselves")
		return
	}
	for i, r := range res {
		if r.Code != store.Released {
			continue
		}
		ev := m.log.Error().Str(keyID, shownID(bad[i].ID)).Int("id_bytes", len(bad[i].ID)).Int(keyShard, c.shard).
			Str("reason", reqs[i].Error)
		if home[i] >= 0 {
			m.stats.WrongShard.Add(1)
			ev.Int("id_shard", home[i]).Msg("item quarantined: planted in another shard than its id's, a second copy whose claims would not exclude the real item's; the real item syncs on")
			continue
		}
		m.stats.DamagedIDs.Add(1)
		ev.Msg("item quarantined: its id, read back from redis, is not one syncd accepts")
	}
}

// wrongShardError is the error a claim quarantines an item with that it
// found in shard, where its id is not (its shard is home): fix included,
// as the API's note on such a copy says it (store.WrongShard).
func wrongShardError(shard, home int) string { return store.WrongShard(shard, home) }

// damagedFence logs, once, an item that a claim quarantined because its
// stored fence cannot be raised (store.ClaimDamaged), and counts it.
func (m *Manager) damagedFence(c *claim, r store.ItemClaim) {
	m.stats.DamagedFences.Add(1)
	m.log.Error().Str(keyID, shownID(r.ID)).Int(keyShard, c.shard).
		Msg("item quarantined: its stored fence is at or past 2^53-1 (planted or corrupt), which syncd never issues and cannot raise exactly; its error in syncd status says how to fix it")
}
