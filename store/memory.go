package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// IsOutOfMemory reports whether err is Redis refusing a write because it
// reached maxmemory and may evict nothing (maxmemory-policy noeviction):
// "OOM command not allowed when used memory > 'maxmemory'", also inside a
// script and wrapped. Retrying cannot help until an operator frees
// memory or raises maxmemory; reads still go through.
func IsOutOfMemory(err error) bool { return redis.IsOOMError(err) }

// OutOfMemory reports whether the server refuses writes for lack of
// memory, as INFO memory says: over maxmemory (what Redis counts
// against it: used_memory less mem_not_counted_for_evict) under
// maxmemory-policy noeviction. Under another policy Redis evicts keys
// first, and INFO cannot tell whether it will find any.
func (in ServerInfo) OutOfMemory() bool {
	return in.MaxmemoryPolicy == "noeviction" && in.Maxmemory > 0 && in.UsedMemory-in.NotCountedForEvict > in.Maxmemory
}

// OutOfMemory returns the address of each master that refuses writes for
// lack of memory (ServerInfo.OutOfMemory), none while every one takes
// them. Daemons cannot claim, release or register on such a master.
func (s *Store) OutOfMemory(ctx context.Context) ([]string, error) {
	infos, err := s.Servers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range infos {
		if in.OutOfMemory() {
			out = append(out, in.Addr)
		}
	}
	return out, nil
}
