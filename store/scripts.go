package store

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptDef is a script as loaded: its file, its body, the prelude
// helpers it lists, and the script (those helpers, then the body).
type scriptDef struct {
	name    string
	body    string
	helpers []string
	script  *redis.Script
}

// scriptDefs lists every script loaded, for loadScripts and the tests.
var scriptDefs []scriptDef

// loadScript returns scripts/<name>.lua with the prelude helpers it
// calls, directly or through another helper, named in helpers. They are
// written in the prelude's order (a helper follows those it calls) and
// no others: Redis compiles a script once but runs its top level on every
// call, and each `local function` there makes a closure, so the whole
// prelude cost about 1 µs per call (BENCHMARKS.md, section 7) whether a
// script used a helper or not. A helper listed but not in the prelude is
// left out; TestScriptHelpers fails on it, and on a helper called but not
// listed.
func loadScript(name string, helpers ...string) *redis.Script {
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err) // embedded at build time: a misspelt name
	}
	listed := map[string]bool{}
	for _, h := range helpers {
		listed[h] = true
	}
	var src strings.Builder
	for _, h := range prelude {
		if listed[h.name] {
			src.WriteString(h.text)
		}
	}
	src.WriteString("\n")
	src.Write(body)
	sc := redis.NewScript(src.String())
	scriptDefs = append(scriptDefs, scriptDef{name: name, body: string(body), helpers: helpers, script: sc})
	return sc
}

// prelude is prelude.lua's helpers, in order.
var prelude = splitPrelude(preludeText)

//go:embed scripts/prelude.lua
var preludeText string

// helper is one `local function` of the prelude with the comment above it.
type helper struct {
	name string
	text string
}

// splitPrelude splits the prelude into its helpers, in order. A helper
// starts at a line `local function <name>(` and takes the unindented
// comment lines just above it; whatever comes before the first helper
// (the comment that opens the file) goes with it.
func splitPrelude(text string) []helper {
	var helpers []helper
	var pending strings.Builder // comment and blank lines not yet placed
	for _, line := range strings.SplitAfter(text, "\n") {
		name, ok := strings.CutPrefix(line, "local function ")
		switch {
		case ok:
			name, _, _ = strings.Cut(name, "(")
			helpers = append(helpers, helper{name: name, text: pending.String() + line})
			pending.Reset()
		case strings.HasPrefix(line, "--") || strings.TrimSpace(line) == "" || len(helpers) == 0:
			pending.WriteString(line)
		default:
			helpers[len(helpers)-1].text += pending.String() + line
			pending.Reset()
		}
	}
	if len(helpers) > 0 {
		helpers[len(helpers)-1].text += pending.String()
	}
	return helpers
}

// The scripts, each documented in its .lua file, with the prelude helpers
// each calls.
var (
	scriptClaimPick = loadScript("claim_pick", "now", "be4", "be8", "unbe", "times", "stamp", "wrongtype", "get_rec", "is_record",
		"token_of", "fence_of", "attempt_of", "num", "send", "meta_of", "meta_get", "enc", "is_inf", "due_ms", "epoch_at",
		"claim_gate", "held", "fence_refused", "claim_clock", "claim_one", "pick_head")
	scriptClaimIDs = loadScript("claim_ids", "now", "be4", "be8", "unbe", "times", "stamp", "wrongtype", "get_rec",
		"is_record", "token_of", "fence_of", "attempt_of", "num", "meta_of", "meta_get", "is_inf", "due_ms",
		"epoch_at", "claim_gate", "held", "fence_refused", "claim_clock", "claim_one", "take", "claim_named")
	scriptClaimBatch = loadScript("claim_batch", "now", "be4", "be8", "unbe", "times", "stamp", "wrongtype", "get_rec",
		"is_record", "token_of", "fence_of", "attempt_of", "num", "meta_of", "meta_get", "is_inf", "due_ms",
		"epoch_at", "claim_gate", "held", "fence_refused", "claim_clock", "claim_one", "take", "claim_named")
	scriptExtend = loadScript("extend", "now", "be8", "unbe", "patch", "wrongtype", "get_rec",
		"token_of", "fence_of", "num", "send")
	scriptRelease = loadScript("release", "now", "be8", "be4", "unbe", "wrongtype", "get_rec", "token_of", "fence_of", "enc",
		"attempt_of", "num", "send", "meta_of", "meta_get", "meta_value", "meta_set")
	scriptAdd     = loadScript("add", "now")
	scriptRemove  = loadScript("remove", "wrongtype")
	scriptRequeue = loadScript("requeue", "now", "be4", "be8", "unbe", "meta_of", "meta_get", "meta_value", "meta_set", "is_inf", "due_ms", "wrongtype")
	scriptTrigger = loadScript("trigger", "now", "wrongtype", "num", "is_inf", "due_ms", "own_type")
	scriptForce   = loadScript("force", "now", "be4", "be8", "unbe", "meta_of", "meta_get", "meta_value", "meta_set")
	scriptLock    = loadScript("lock", "now", "be8", "unbe", "times", "wrongtype", "token_of", "fence_of", "num")
	scriptUnlock  = loadScript("unlock", "wrongtype", "get_rec", "token_of")
	scriptUnlockB = loadScript("unlock_batch", "be4", "wrongtype", "get_rec", "token_of")
	scriptEpoch   = loadScript("epoch", "now", "wrongtype", "num", "epoch_at")
	scriptPending = loadScript("pending", "now", "unbe", "meta_of", "meta_get", "is_inf", "due_ms")
	scriptBatch   = loadScript("batch", "now", "wrongtype", "num")

	scriptDeployment     = loadScript("deployment", "now", "num")
	scriptDeploymentRead = loadScript("deployment_read", "now")
	scriptDataLoss       = loadScript("data_loss", "own_type")
	scriptReconcile      = loadScript("reconcile", "now", "wrongtype", "num", "own_type")
	scriptAddManual      = loadScript("add_manual", "now", "own_type")

	scriptTargetAdmit  = loadScript("target_admit", "now", "num", "own_type", "breaker_of", "breaker_get")
	scriptTargetReport = loadScript("target_report", "now", "own_type", "breaker_of", "breaker_get")
	scriptTargetExtend = loadScript("target_extend", "now", "own_type")
	scriptTargetState  = loadScript("target_state", "now", "breaker_of")

	scriptDaemonWrite = loadScript("daemon_write", "now")
)

// ScriptSHAs maps each script's file name ("claim_pick.lua") to the SHA1
// of the text it is loaded as, for tools that count EVALSHA calls per
// script (bench).
func ScriptSHAs() map[string]string {
	out := make(map[string]string, len(scriptDefs))
	for _, d := range scriptDefs {
		out[d.name+".lua"] = d.script.Hash()
	}
	return out
}

// isNoScript reports a NOSCRIPT reply: the server lost its script cache
// (a restart or failover); the caller loads the scripts and tries again.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// loadScripts loads every script on every master, so that EVALSHA inside
// pipelines finds them.
func loadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	load := func(ctx context.Context, c *redis.Client) error {
		for _, d := range scriptDefs {
			if err := d.script.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, load)
	}
	for _, d := range scriptDefs {
		if err := d.script.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}
