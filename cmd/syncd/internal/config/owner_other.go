//go:build !unix

package config

import "io/fs"

// fileOwner says nothing where there is no Unix owner: no file is
// warned of for its owner.
func fileOwner(fs.FileInfo) (uid int, ok bool) { return 0, false }
