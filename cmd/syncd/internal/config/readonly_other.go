//go:build !linux

package config

// readOnlyFS is false off Linux: a directory's mode is taken as it is.
func readOnlyFS(string) bool { return false }
