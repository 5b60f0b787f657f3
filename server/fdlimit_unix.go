//go:build unix

package server

import "syscall"

// FileLimit is the most descriptors the process may have open
// (RLIMIT_NOFILE's soft limit), 0 if unknown.
func FileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		return 0
	}
	return int(lim.Cur)
}
