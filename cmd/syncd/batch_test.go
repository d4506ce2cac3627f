package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/store"
)

// The batch summary lists a copy planted in another shard than its id's
// on a line of its own, with its shard and the fix, not among the
// quarantined items, whose ids the real items' are.
func TestWriteSummaryWrongShard(t *testing.T) {
	now := time.Now()
	var b bytes.Buffer
	writeSummary(&b, &engine.Report{Items: 3, Synced: 3, Started: now, Finished: now.Add(time.Second),
		WrongShard: []store.ShardItem{{ID: "fine-1", Shard: 1}, {ID: "\x1b[2J", Shard: 0}}, WrongShardCount: 2})
	out := b.String()
	for _, want := range []string{"quarantined                0  \n", `wrong shard                2  fine-1 (shard 1) \x1b[2J (shard 0)`, "syncd items remove --shard N"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
