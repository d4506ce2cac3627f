package store

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

func loadScript(name string) *redis.Script {
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		panic(err) // embedded at build time
	}
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(trimPrelude(string(prelude), string(body)) + "\n" + string(body))
}

// trimPrelude keeps the prelude's helpers that body uses, directly or
// through another helper, in their order. Redis compiles a script once
// but runs its top level on every call, and each `local function` there
// makes a closure: the whole prelude cost about 1 µs per call
// (BENCHMARKS.md, section 7) whether a script used a helper or not.
func trimPrelude(prelude, body string) string {
	type helper struct {
		name string
		text string
	}
	var helpers []helper
	var pending strings.Builder // comment lines above the next helper
	for _, line := range strings.SplitAfter(prelude, "\n") {
		name, ok := strings.CutPrefix(line, "local function ")
		switch {
		case ok:
			name, _, _ = strings.Cut(name, "(")
			helpers = append(helpers, helper{name: name, text: pending.String() + line})
			pending.Reset()
		case strings.HasPrefix(line, "--") || strings.TrimSpace(line) == "":
			pending.WriteString(line)
		case len(helpers) > 0:
			helpers[len(helpers)-1].text += line // the helper's body
		default:
			panic("store: prelude.lua: code outside a helper: " + line)
		}
	}
	uses := func(text, name string) bool {
		for i := strings.Index(text, name+"("); i >= 0; {
			if i == 0 || !isIdent(text[i-1]) {
				return true
			}
			j := strings.Index(text[i+1:], name+"(")
			if j < 0 {
				return false
			}
			i += 1 + j
		}
		return false
	}
	keep := make([]bool, len(helpers))
	for changed := true; changed; {
		changed = false
		for i, h := range helpers {
			if keep[i] {
				continue
			}
			if uses(body, h.name) {
				keep[i], changed = true, true
				continue
			}
			for j, k := range helpers {
				if keep[j] && j != i && uses(k.text[strings.Index(k.text, "local function "):], h.name) {
					keep[i], changed = true, true
					break
				}
			}
		}
	}
	var out strings.Builder
	for i, h := range helpers {
		if keep[i] {
			out.WriteString(h.text)
		}
	}
	return out.String()
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// The scripts, each documented in its .lua file.
var (
	scriptClaim   = loadScript("claim")
	scriptExtend  = loadScript("extend")
	scriptRelease = loadScript("release")
	scriptDue     = loadScript("due")
	scriptAdd     = loadScript("add")
	scriptRemove  = loadScript("remove")
	scriptRequeue = loadScript("requeue")
	scriptForce   = loadScript("force")
	scriptLock    = loadScript("lock")
	scriptUnlock  = loadScript("unlock")
	scriptEpoch   = loadScript("epoch")
	scriptPending = loadScript("pending")
	scriptBatch   = loadScript("batch")
)

var allScripts = []*redis.Script{
	scriptClaim, scriptExtend, scriptRelease, scriptDue, scriptAdd, scriptRemove,
	scriptRequeue, scriptForce, scriptLock, scriptUnlock, scriptEpoch, scriptPending, scriptBatch,
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
		for _, s := range allScripts {
			if err := s.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, load)
	}
	for _, s := range allScripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}
