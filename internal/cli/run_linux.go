package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// setParentDeathSignal has the kernel kill the command if baton run dies
// without stopping it (SIGKILL, a crash): its lock is gone with baton run's
// connection. Only the command gets it, not what it started.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// groupHasLiveMember reports whether a process of group pgid is not a
// zombie, from /proc. If /proc cannot be read it says true: the group
// exists, as kill told.
func groupHasLiveMember(pgid int) bool {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true
	}
	want := []byte(strconv.Itoa(pgid))
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // it ended while we looked
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || !bytes.Equal(f[2], want) {
			continue
		}
		if st := f[0]; len(st) == 1 && (st[0] == 'Z' || st[0] == 'X') {
			continue
		}
		return true
	}
	return false
}
