//go:build unix

package tokenstore

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// lockDir takes an exclusive POSIX record lock on dir/lock, held until the
// process ends, so that two servers never share a data directory and hand
// out the same tokens. A record lock belongs to the process, not to the
// file descriptor: a second Open in the same process (a restart in a test)
// takes it again, while another process is refused at once. The kernel
// drops the lock when the process dies, kill -9 included.
func lockDir(dir string) error {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("tokenstore: %w", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		f.Close()
		return fmt.Errorf("tokenstore: data directory %s is in use by another process (lock on %s: %v)", dir, path, err)
	}
	// f stays open for the life of the process: closing any descriptor of
	// the file would drop the lock.
	heldMu.Lock()
	heldLocks = append(heldLocks, f)
	heldMu.Unlock()
	return nil
}

// heldLocks keeps the lock files open (and out of the garbage collector's
// finalizers, which would close them); see lockDir.
var (
	heldMu    sync.Mutex
	heldLocks []*os.File
)
