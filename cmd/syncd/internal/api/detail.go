package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/syncd/syncd/store"
)

// ErrorEntry is one of an item's last failures.
type ErrorEntry struct {
	AtMs  int64  `json:"at_ms"`
	Error string `json:"error"`
	Fence uint64 `json:"fence"`
}

// ItemDetail is GET /api/v1/items/{id}.
type ItemDetail struct {
	Item
	LeaseLeftMs int64        `json:"lease_left_ms"`
	Quarantined bool         `json:"quarantined"`
	Errors      []ErrorEntry `json:"errors"` // newest first
	// ErrorsLost: the item's last error is unknown, not none (last_error
	// is ""), since its shard's err hash is damaged; Note names the key
	// (store.DamageError.ErrorsLost, as the list's damaged does).
	ErrorsLost bool `json:"errors_lost,omitempty"`
	// WrongShard: the item was not in its id's own shard but in Shard, a
	// copy planted there by hand that a claim quarantines; Note says how
	// to remove it.
	WrongShard bool `json:"wrong_shard,omitempty"`
	// Note says what is wrong with what was read, and the fix; "" when
	// nothing is.
	Note string `json:"note,omitempty"`
}

func (a *api) item(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := storeCtx(r)
	defer cancel()
	id := r.PathValue("id")
	d, err := a.st.Item(ctx, id)
	wrong := errors.Is(err, store.ErrUnknownItem)
	if wrong {
		d, err = a.plantedItem(ctx, id, err)
	}
	if err != nil {
		a.storeFailed(w, err)
		return
	}
	out := ItemDetail{Item: ItemOf(d.ItemState, d.Now), LeaseLeftMs: d.LeaseLeft.Milliseconds(),
		Quarantined: d.Quarantined, Errors: make([]ErrorEntry, len(d.Errors)), WrongShard: wrong}
	for i, e := range d.Errors {
		out.Errors[i] = ErrorEntry{AtMs: e.At, Error: ItemError(d.ID, e.Error), Fence: e.Fence}
	}
	var notes []string
	if wrong {
		notes = append(notes, store.WrongShard(d.Shard, a.st.Keys().Shard(id)))
	}
	if d.ErrorsLost != nil {
		out.ErrorsLost = true
		notes = append(notes, "last error unknown: "+Plain(d.ErrorsLost, ""))
	}
	out.Note = strings.Join(notes, "; ")
	writeJSON(w, http.StatusOK, out)
}

// plantedItem reads id where it is not in its own shard (unknown, the
// error Item gave): in the first other shard that holds it, a copy
// planted there by hand. It gives back unknown when no shard does.
func (a *api) plantedItem(ctx context.Context, id string, unknown error) (store.ItemDetail, error) {
	shards, err := a.st.ShardsOf(ctx, id)
	if err != nil {
		return store.ItemDetail{}, err
	}
	for _, sh := range shards {
		if sh != a.st.Keys().Shard(id) {
			return a.st.ItemInShard(ctx, sh, id)
		}
	}
	return store.ItemDetail{}, unknown
}

// Daemon is one daemon in GET /api/v1/owners.
type Daemon struct {
	store.DaemonInfo
	HeartbeatAgeMs int64  `json:"heartbeat_age_ms"`
	Problem        string `json:"problem,omitempty"`
}

// Owners is GET /api/v1/owners.
type Owners struct {
	Daemons []Daemon `json:"daemons"`
}

func (a *api) owners(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := storeCtx(r)
	defer cancel()
	ds, now, err := a.st.Daemons(ctx)
	if err != nil {
		a.storeFailed(w, err)
		return
	}
	out := Owners{Daemons: make([]Daemon, len(ds))}
	for i, d := range ds {
		if d.InFlight == nil {
			d.InFlight = []string{}
		}
		out.Daemons[i] = Daemon{DaemonInfo: d, HeartbeatAgeMs: max(now-d.Heartbeat, 0), Problem: d.Problem}
	}
	writeJSON(w, http.StatusOK, out)
}
