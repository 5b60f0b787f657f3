//go:build !unix

package tokenstore

// lockDir is a no-op where POSIX record locks are not available: nothing
// stops two servers from sharing a data directory there.
func lockDir(dir string) error { return nil }
