// Command customsink shows how to write a sink and run the engine with it
// from your own program: a sink that upserts into a (here: in-memory)
// table and enforces fencing the way a real database would, run as a
// batch pass over a few items on the embedded store.
//
//	go run ./examples/customsink
//
// Point store.Config.Addrs at a Redis to share the work with other
// processes running the same program. With -listen, the program also
// serves /metrics, /healthz and /readyz while it runs, in one line
// (engine.Handler), and waits for Enter before it exits:
//
//	go run ./examples/customsink -listen 127.0.0.1:9090
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/syncd/syncd/engine"
	"github.com/syncd/syncd/sinks"
	"github.com/syncd/syncd/store"
)

// customerTable stands in for the system you sync into. Each row keeps
// the fence of the claim that wrote it, and a write with a lower fence is
// refused: in SQL,
//
//	UPDATE customers SET data = $3, fence = $2 WHERE id = $1 AND fence <= $2
//
// and zero rows updated means a newer owner has written: return
// sinks.ErrStaleFence.
type customerTable struct {
	mu   sync.Mutex
	rows map[string]row
}

type row struct {
	data  string
	fence uint64
}

func (t *customerTable) upsert(id, data string, fence uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.rows[id]; ok && cur.fence > fence {
		return fmt.Errorf("customer %s: %w", id, sinks.ErrStaleFence)
	}
	t.rows[id] = row{data: data, fence: fence}
	return nil
}

// customerSink syncs one customer: fetch (simulated), then write with the
// claim's fence.
type customerSink struct{ table *customerTable }

func (s *customerSink) Sync(ctx context.Context, it sinks.Item) error {
	select { // the fetch; honour cancellation: a lost lease cancels ctx
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	since := "ever"
	if !it.LastSync.IsZero() {
		since = it.LastSync.Format(time.RFC3339) // incremental: only changes since then
	}
	return s.table.upsert(it.ID, "changes since "+since, it.Fence)
}

func (s *customerSink) Close() error { return nil }

func main() {
	listen := flag.String("listen", "", "serve /metrics, /healthz and /readyz on this address")
	flag.Parse()
	ctx := context.Background()
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel)
	st, err := store.Open(ctx, store.Config{Logger: log}) // no Addrs: embedded store
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer st.Close()
	if _, err := st.Add(ctx, "acme", "globex", "initech", "umbrella", "hooli"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	table := &customerTable{rows: map[string]row{}}
	e, err := engine.New(st, &customerSink{table: table}, engine.Config{Workers: 3, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *listen != "" {
		// Prometheus scrapes and probes get the engine's metrics (with the
		// Go and process collectors) and health, on a registry of its own.
		go func() {
			if err := http.ListenAndServe(*listen, engine.Handler(e)); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	rep, err := e.RunBatch(ctx, engine.BatchOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("synced %d of %d customers\n", rep.Synced, rep.Items)
	ids := make([]string, 0, len(table.rows))
	for id := range table.rows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Printf("  %-9s %s (fence %d)\n", id, table.rows[id].data, table.rows[id].fence)
	}
	if *listen != "" {
		fmt.Printf("serving http://%s/metrics; press Enter to exit\n", *listen)
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
}
