package web

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/redis/go-redis/v9"

	"github.com/syncd/syncd/store"
	"github.com/syncd/syncd/tests/testutil"
)

// The page against three daemons and 1,000 items, as an operator uses
// it: one browser and one fleet for the whole walk, since starting them
// is most of the cost; each step is a subtest that needs the ones
// before it.
func TestPage(t *testing.T) {
	chromium := chromiumPath(t)
	f := startFleet(t)
	b := newBrowser(t, chromium)
	want := f.settle(t)

	b.open(f.urls[0] + "#summary")
	// A mark the page's script does not know: it survives only while the
	// page is never reloaded.
	eval[bool](b, `window.__noReload = true`)

	t.Run("summary counts match status", func(t *testing.T) {
		b.t = t
		b.waitText(10*time.Second, "#count-quarantined", "3")
		for sel, n := range map[string]int{"#count-items": want.Items, "#count-due": want.Due, "#count-in-flight": want.InFlight,
			"#count-backing-off": want.BackingOff, "#count-quarantined": want.Quarantined, "#count-daemons": 3} {
			if got := number(t, b.text(sel)); got != n {
				t.Errorf("%s shows %d, syncd status --json says %d", sel, got, n)
			}
		}
		if got := b.text("#nav-quarantined-count"); got != "3" {
			t.Errorf("the quarantined badge shows %q", got)
		}
		if b.text("#count-workers") != "12" {
			t.Errorf("workers %q, want 12 (3 daemons of 4)", b.text("#count-workers"))
		}
		// The charts need two samples of history, one every 2 s.
		b.waitJS(15*time.Second, "backlog and throughput charts",
			`document.querySelector('#chart-backlog svg path') && document.querySelector('#chart-throughput svg path')`)
		if b.text("#refresh-status") != "Live: every 2 s" {
			t.Errorf("refresh status %q", b.text("#refresh-status"))
		}
		b.shot("summary.png")
	})

	t.Run("items table filters and pages", func(t *testing.T) {
		b.t = t
		b.click("#nav-items")
		b.waitJS(10*time.Second, "a full first page", `document.querySelectorAll('[data-testid=items-row]').length === 50`)
		b.shot("items.png")
		first := b.text("[data-testid=items-row] .id-link")
		b.click("#items-next")
		b.waitJS(10*time.Second, "the second page", `document.querySelector('[data-testid=items-row] .id-link').textContent !== `+jsString(first)+
			` && !document.querySelector('#items-first').disabled`)
		if !strings.Contains(b.text("#items-page-note"), "showing 51–100") {
			t.Errorf("page note %q", b.text("#items-page-note"))
		}
		b.click("#items-first")
		b.waitJS(10*time.Second, "the first page again", `document.querySelector('[data-testid=items-row] .id-link').textContent === `+jsString(first))

		b.typeInto("#filter-prefix", "item-09")
		b.click("#filter-apply")
		b.waitJS(10*time.Second, "only item-09… rows",
			`[...document.querySelectorAll('[data-testid=items-row]')].every((r) => r.dataset.id.startsWith('item-09')) && document.querySelectorAll('[data-testid=items-row]').length === 50`)
		b.click("#items-next")
		b.waitJS(10*time.Second, "the rest of item-09…",
			`[...document.querySelectorAll('[data-testid=items-row]')].every((r) => r.dataset.id.startsWith('item-09')) && document.querySelectorAll('[data-testid=items-row]').length === 50 && document.querySelector('#items-first').disabled === false`)

		b.typeInto("#filter-prefix", "")
		eval[bool](b, `(document.querySelector('#filter-state').value = 'quarantined') === 'quarantined'`)
		b.click("#filter-apply")
		b.waitJS(10*time.Second, "the 3 quarantined items", `document.querySelectorAll('[data-testid=items-row]').length === 3`)
		for _, id := range poisoned {
			if b.count(`[data-testid=items-row][data-id="`+id+`"]`) != 1 {
				t.Errorf("%s is not in the quarantined filter", id)
			}
		}
		eval[bool](b, `(document.querySelector('#filter-state').value = 'all') === 'all'`)
		b.click("#filter-apply")
		b.waitJS(10*time.Second, "all items again", `document.querySelectorAll('[data-testid=items-row]').length === 50`)
	})

	t.Run("quarantined item shows its error", func(t *testing.T) {
		b.t = t
		b.click("#nav-quarantined")
		b.waitJS(10*time.Second, "3 quarantined rows", `document.querySelectorAll('[data-testid=quarantined-row]').length === 3`)
		if got := b.text(`[data-testid=quarantined-row][data-id="item-0007"] [data-testid=last-error]`); !strings.Contains(got, "upstream refused item-0007: 422 invalid record") {
			t.Errorf("last error in the quarantined table: %q", got)
		}
		b.click(`[data-testid=quarantined-row][data-id="item-0007"] .id-link`)
		b.waitJS(10*time.Second, "item-0007's errors", `document.querySelectorAll('[data-testid=error-text]').length > 0`)
		if got := b.text("#item-id"); got != "item-0007" {
			t.Errorf("detail of %q", got)
		}
		if got := b.text("[data-testid=item-quarantined]"); got != "yes" {
			t.Errorf("quarantined: %q", got)
		}
		if got := b.text("[data-testid=error-text]"); !strings.Contains(got, "upstream refused item-0007: 422 invalid record") {
			t.Errorf("newest error: %q", got)
		}
		if n := b.count("[data-testid=error-row]"); n != 3 {
			t.Errorf("%d errors shown, want 3 (max_attempts)", n)
		}
		b.shot("item-detail.png")
	})

	t.Run("requeue from the page takes effect", func(t *testing.T) {
		b.t = t
		// The upstream is fixed; the operator requeues the item.
		os.Remove(filepath.Join(f.poison, "item-0007"))
		b.waitJS(5*time.Second, "the token field", `!document.querySelector('#token-box').hidden`)
		b.typeInto("#token", apiToken)
		b.click("[data-testid=item-requeue]")
		if d := b.lastDialog(1); !strings.Contains(d, "Requeue 1 item?") || !strings.Contains(d, "item-0007") {
			t.Errorf("confirm dialog %q", d)
		}
		b.waitJS(10*time.Second, "the requeue's answer", `document.querySelector('#message').textContent.includes('requeued 1')`)
		b.waitText(15*time.Second, "[data-testid=item-quarantined]", "no")
		b.waitText(15*time.Second, "#count-quarantined", "2")
		if st := f.status(t); st.Quarantined != 2 {
			t.Errorf("status --json: %d quarantined after the requeue, want 2", st.Quarantined)
		}

		// Bulk: select the other two in the quarantined view.
		for _, id := range poisoned[1:] {
			os.Remove(filepath.Join(f.poison, id))
		}
		b.click("#nav-quarantined")
		b.waitJS(10*time.Second, "2 quarantined rows", `document.querySelectorAll('[data-testid=quarantined-row]').length === 2`)
		b.click("#quarantined-select-all")
		b.waitText(5*time.Second, "#quarantined-bulk [data-role=selected-count]", "2 selected")
		b.click("#quarantined-bulk-requeue")
		if d := b.lastDialog(2); !strings.Contains(d, "Requeue 2 items?") {
			t.Errorf("confirm dialog %q", d)
		}
		b.waitText(15*time.Second, "#count-quarantined", "0")
		b.waitJS(10*time.Second, "an empty quarantined view", `document.querySelectorAll('[data-testid=quarantined-row]').length === 0`)
		if st := f.status(t); st.Quarantined != 0 {
			t.Errorf("status --json: %d quarantined after the bulk requeue, want 0", st.Quarantined)
		}
		if sessionToken := eval[string](b, `sessionStorage.getItem('syncd.token') || ''`); sessionToken != apiToken {
			t.Errorf("token in sessionStorage %q", sessionToken)
		}
		if eval[bool](b, `document.documentElement.outerHTML.includes(`+jsString(apiToken)+`)`) {
			t.Error("the token is in the page's HTML")
		}
	})

	t.Run("live refresh without reload, pausable", func(t *testing.T) {
		b.t = t
		// A keyboard user's focus stays on the same row's link while
		// the table changes under it.
		b.click("#nav-items")
		b.waitJS(10*time.Second, "a full first page", `document.querySelectorAll('[data-testid=items-row]').length === 50`)
		// Focus takes only once the view is shown (the rows of its last
		// visit can be there before): retried until it holds.
		b.waitJS(10*time.Second, "the first row's link focused",
			`(() => { const a = document.querySelector('[data-testid=items-row] .id-link'); if (!a) return false; a.focus(); return document.activeElement === a; })()`)
		focused := eval[string](b, `document.activeElement.textContent`)
		second := b.text("[data-testid=items-row]:nth-child(2) .id-link")
		if r := f.syncd(t, "items", "remove", "-c", f.cfgs[1], second); r.Code != 0 {
			t.Fatalf("items remove: %s", r)
		}
		b.waitText(10*time.Second, "#count-items", "999")
		b.waitJS(10*time.Second, second+" gone from the table", `!document.querySelector('[data-testid=items-row][data-id="`+second+`"]')`)
		if got := eval[string](b, `document.activeElement === document.body ? '(the page body)' : document.activeElement.textContent.slice(0, 60)`); got != focused {
			t.Errorf("focus moved from %q to %q when the table changed", focused, got)
		}
		if r := f.syncd(t, "items", "add", "-c", f.cfgs[1], second, "extra-1", "extra-2"); r.Code != 0 {
			t.Fatalf("items add: %s", r)
		}
		b.waitText(10*time.Second, "#count-items", "1,002")
		b.click("#nav-summary")
		b.click("#pause")
		b.waitText(5*time.Second, "#refresh-status", "Paused")
		if r := f.syncd(t, "items", "remove", "-c", f.cfgs[1], "extra-1", "extra-2"); r.Code != 0 {
			t.Fatalf("items remove: %s", r)
		}
		time.Sleep(3 * time.Second) // more than one refresh period
		if got := b.text("#count-items"); got != "1,002" {
			t.Errorf("paused page changed its count to %s", got)
		}
		b.click("#pause")
		b.waitText(10*time.Second, "#count-items", "1,000")
		if !eval[bool](b, `window.__noReload === true`) {
			t.Error("the page was reloaded")
		}
	})

	t.Run("owners lists three daemons", func(t *testing.T) {
		b.t = t
		// By keyboard: the views are links.
		b.do("press Enter on Owners", chromedp.Focus(chromedp.CSS("#nav-owners")), chromedp.SendKeys(chromedp.CSS("#nav-owners"), kb.Enter))
		b.waitJS(10*time.Second, "3 daemons", `document.querySelectorAll('[data-testid=owner-row]').length === 3`)
		rows := eval[[]string](b, `[...document.querySelectorAll('[data-testid=owner-row]')].map((r) => r.innerText)`)
		for _, r := range rows {
			if !strings.Contains(r, "running") || !strings.Contains(r, "4") {
				t.Errorf("owner row %q", r)
			}
		}
		b.shot("owners.png")
	})

	t.Run("phone width in dark mode", func(t *testing.T) {
		b.t = t
		b.phone(true)
		defer b.phone(false)
		b.click("#nav-summary")
		b.waitJS(15*time.Second, "the charts", `document.querySelector('#chart-backlog svg path')`)
		if w := eval[int](b, `document.documentElement.scrollWidth`); w > 375 {
			t.Errorf("the page is %d px wide at a 375 px viewport", w)
		}
		if bg := eval[string](b, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(17, 20, 24)" {
			t.Errorf("body background %s in dark mode", bg)
		}
		b.shot("summary-phone-dark.png")
	})
	b.t = t
	b.noErrors()

	t.Run("syncd ui serves the page", func(t *testing.T) {
		b.t = t
		b.open(f.ui(t, f.cfgs[0]))
		b.waitText(10*time.Second, "#count-items", "1,000")
		b.waitText(10*time.Second, "#count-daemons", "3")
		b.noErrors()
	})

	t.Run("read-only without a token", func(t *testing.T) {
		b.t = t
		cfg, err := os.ReadFile(f.cfgs[0])
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, l := range strings.Split(string(cfg), "\n") {
			if !strings.Contains(l, "api_token_file") {
				kept = append(kept, l)
			}
		}
		b.open(f.ui(t, testutil.WriteFile(t, "readonly.yaml", strings.Join(kept, "\n"))) + "#item/item-0007")
		b.waitText(10*time.Second, "#count-items", "1,000")
		b.waitJS(10*time.Second, "item-0007's record", `document.querySelector('[data-testid=item-attempts]')`)
		if eval[bool](b, `!document.querySelector('#token-box').hidden || !document.querySelector('#item-actions').hidden`) {
			t.Error("token field or actions shown while no token is configured")
		}
		b.noErrors()
	})

	// A shard held off (as after a data loss, or on a new deployment)
	// says so above the counts, and the line goes when the hold ends.
	t.Run("held-off shards are named", func(t *testing.T) {
		b.t = t
		b.open(f.urls[0] + "#summary")
		if eval[bool](b, `!document.querySelector('[data-testid=held-off]').hidden`) {
			t.Error("hold-off line shown while no shard is held off")
		}
		rdb := redis.NewClient(&redis.Options{Addr: f.redis})
		defer rdb.Close()
		epoch := store.NewKeys("web", 4).Epoch(0)
		if err := rdb.Set(t.Context(), epoch, strconv.FormatInt(time.Now().Add(20*time.Second).UnixMilli(), 10), 0).Err(); err != nil {
			t.Fatal(err)
		}
		b.waitJS(10*time.Second, "the hold-off line", `(() => { const e = document.querySelector('[data-testid=held-off]');
			return !e.hidden && e.textContent.startsWith('Claims wait: 1 shard held off for up to ') })()`)
		rdb.Set(t.Context(), epoch, strconv.FormatInt(time.Now().UnixMilli(), 10), 0) // the hold ends
		b.waitJS(10*time.Second, "the hold-off line gone", `document.querySelector('[data-testid=held-off]').hidden`)
		b.noErrors()
	})

	// A copy of an item planted in another shard than its id's is no
	// item: the counts leave it out and a line says so, as status does,
	// until syncd items remove --shard removes it.
	t.Run("a copy in the wrong shard is counted apart", func(t *testing.T) {
		b.t = t
		b.open(f.urls[0] + "#summary")
		b.waitText(10*time.Second, "#count-items", "1,000")
		rdb := redis.NewClient(&redis.Options{Addr: f.redis})
		defer rdb.Close()
		keys := store.NewKeys("web", 4)
		other := (keys.Shard("item-0001") + 1) % 4
		if err := rdb.ZAdd(t.Context(), keys.Due(other), redis.Z{Score: math.Inf(1), Member: "item-0001"}).Err(); err != nil {
			t.Fatal(err)
		}
		want := "Wrong shard: 1 copy planted in another shard than their id's, quarantined there; the real items are counted above; syncd items remove --shard N removes one."
		b.waitJS(10*time.Second, "the wrong-shard line", `(() => { const e = document.querySelector('[data-testid=wrong-shard]');
			return !e.hidden && e.textContent === `+jsString(want)+` })()`)
		st := f.status(t)
		if items, quar := number(t, b.text("#count-items")), number(t, b.text("#count-quarantined")); items != nItems || st.Items != nItems || quar != st.Quarantined {
			t.Errorf("counts with a copy in shard %d: %d items, %d quarantined (status --json: %d, %d); want %d items, the copy in neither",
				other, items, quar, st.Items, st.Quarantined, nItems)
		}
		if r := f.syncd(t, "items", "remove", "--shard", strconv.Itoa(other), "-c", f.cfgs[0], "item-0001"); r.Code != 0 {
			t.Fatalf("items remove --shard %d: %s", other, r)
		}
		b.waitJS(10*time.Second, "the wrong-shard line gone", `document.querySelector('[data-testid=wrong-shard]').hidden`)
		b.noErrors()
	})

	// Redis at maxmemory refuses writes, so the daemons cannot register
	// and their count may be low: the page says so under the counts, as
	// status does, and the line goes once memory is freed. Before, the
	// page said nothing while status and the API's summary
	// (redis_out_of_memory) did.
	t.Run("redis out of memory is said", func(t *testing.T) {
		b.t = t
		b.open(f.urls[0] + "#summary")
		b.waitText(10*time.Second, "#count-daemons", "3")
		if eval[bool](b, `!document.querySelector('[data-testid=out-of-memory]').hidden`) {
			t.Error("out-of-memory line shown while Redis takes writes")
		}
		free := f.srv.FillMemory(t)
		// Filled, with three daemons on it, Redis's use fell 90 KB below
		// maxmemory within a second (its writes went through again until
		// it was full once more), and INFO said it took writes: hold
		// maxmemory well below its use (about 4.5 MB), out of memory
		// until freed.
		if err := f.srv.Client(t).ConfigSet(t.Context(), "maxmemory", "1mb").Err(); err != nil {
			t.Fatal(err)
		}
		want := "Warning: redis " + f.redis + " is out of memory (maxmemory reached, maxmemory-policy noeviction) and refuses writes: " +
			"daemons cannot claim, release or register, so the daemon count may be low; free memory or raise maxmemory."
		b.waitJS(10*time.Second, "the out-of-memory line", `(() => { const e = document.querySelector('[data-testid=out-of-memory]');
			return !e.hidden && e.textContent === `+jsString(want)+` })()`)
		if !eval[bool](b, `document.querySelector('#count-daemons').parentElement.classList.contains('set')`) {
			t.Error("the daemon count is not marked while Redis is out of memory")
		}
		free()
		b.waitJS(10*time.Second, "the out-of-memory line gone", `document.querySelector('[data-testid=out-of-memory]').hidden &&
			!document.querySelector('#count-daemons').parentElement.classList.contains('set')`)
		b.noErrors()
	})

	// After Redis lost the deployment's data, the page says when and what
	// came back under the counts, in the words of syncd status's line
	// (data_loss). Before, status said it and the page did not, though
	// the README says the page always agrees with status.
	t.Run("redis data loss is said as status says it", func(t *testing.T) {
		b.t = t
		b.open(f.urls[0] + "#summary")
		b.waitText(10*time.Second, "#count-items", "1,000")
		if eval[bool](b, `!!document.querySelector('[data-testid=data-loss]:not([hidden])')`) {
			t.Error("data-loss line shown before Redis lost any data")
		}
		if err := f.srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		// Each daemon that finds the loss records what it restored: wait
		// until status and the page say the same.
		var line, page string
		testutil.WaitFor(t, 30*time.Second, 200*time.Millisecond, "the page's data-loss line to match status's", func() bool {
			r := f.syncd(t, "status", "-c", f.cfgs[0], "--limit", "1")
			line = ""
			for l := range strings.Lines(r.Stdout) {
				if strings.HasPrefix(l, "redis last lost this deployment's data ") {
					line = strings.TrimSuffix(l, "\n")
				}
			}
			page = eval[string](b, `(() => { const e = document.querySelector('[data-testid=data-loss]');
				return !e || e.hidden || e.children.length ? '' : e.textContent })()`)
			return line != "" && page == "R"+line[1:]+"."
		})
		if !strings.Contains(page, " at 20") || !strings.Contains(page, ": 1000 items restored from the sources; ") {
			t.Errorf("data-loss line %q: want its time and the 1000 items restored", page)
		}
		b.noErrors()
	})

	// A link with a malformed escape threw a URIError and left the page
	// on "Loading…" (an attacker's trial): it opens as written.
	t.Run("a malformed fragment opens as written", func(t *testing.T) {
		b.t = t
		b.open(f.urls[0] + "#item/%E0%A4%A")
		b.waitJS(10*time.Second, "the item view", `!document.querySelector('#view-item').hidden && document.querySelector('#item-id').textContent === '%E0%A4%A'`)
		b.noErrors()
	})
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}
