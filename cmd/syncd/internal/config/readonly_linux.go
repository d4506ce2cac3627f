package config

import "golang.org/x/sys/unix"

// readOnlyFS reports whether dir is on a file system mounted read-only,
// where no one can write, whatever its mode says: Kubernetes mounts
// ConfigMap volumes read-only in a 0777 directory.
func readOnlyFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}
