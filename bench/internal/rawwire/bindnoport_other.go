//go:build !linux

package rawwire

import "syscall"

// bindNoPort: other platforms bind the local port at bind, as before.
func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
