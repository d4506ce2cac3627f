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
	return redis.NewScript(string(prelude) + "\n" + string(body))
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
