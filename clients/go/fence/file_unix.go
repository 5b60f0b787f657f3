//go:build unix

package fence

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SidecarSuffix names the file beside a fenced file that keeps its mark:
// "<percent-encoded lock name>=<token in 20 digits>\n", read and written
// under flock(2).
const SidecarSuffix = ".fence"

// Check records h's token as the mark of the file at path (in its
// sidecar, path + ".fence", under flock(2)), or returns a *StaleError
// (ErrStale) when a higher token has been seen. Call it when the lock is
// granted, before reading path, so that a stale holder which read before
// this one cannot write after it.
func Check(path string, h Holder) error {
	name, token, err := check(h)
	if err != nil {
		return err
	}
	return withMark(path, name, token, nil)
}

// WriteFile writes data to path for h, so that a stale holder's write
// never lands: data goes to a temporary file beside path (synced), then,
// under flock(2) on the sidecar, h's token is checked against the mark and
// recorded, and the temporary file is renamed over path. A stale holder
// gets a *StaleError (ErrStale) and its temporary file is removed. Readers
// of path see the old file or the new one, never a part. perm is the new
// file's mode. It works on a local file system, where rename is atomic and
// flock is kept by the kernel.
func WriteFile(path string, data []byte, perm os.FileMode, h Holder) error {
	name, token, err := check(h)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	landed := false
	defer func() {
		if !landed {
			os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fence: write %s: %w", tmp.Name(), err)
	}
	return withMark(path, name, token, func() error {
		if err := os.Rename(tmp.Name(), path); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		landed = true
		return syncDir(dir)
	})
}

// withMark holds flock(2) on path's sidecar while it checks token against
// the mark, records it, and runs then (if not nil).
func withMark(path, name string, token uint64, then func() error) error {
	side := path + SidecarSuffix
	f, err := os.OpenFile(side, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer f.Close() // and with it the flock
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("fence: flock %s: %w", side, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return fmt.Errorf("fence: read %s: %w", side, err)
	}
	line := escapeName(name) + "=" + fmt.Sprintf("%020d", token) + "\n"
	if len(b) > 0 {
		seenName, seen, err := parseMark(string(b))
		switch {
		case err != nil:
			return fmt.Errorf("fence: %s: %w", side, err)
		case seenName != name:
			return fmt.Errorf("fence: %s is fenced by lock %q, not %q", path, seenName, name)
		case token < seen:
			return &StaleError{Lock: name, Token: token, Err: fmt.Errorf("stale fencing token %d: %s has seen token %d", token, side, seen)}
		case token == seen:
			line = "" // nothing to record
		}
	}
	if line != "" {
		// The same length for one name, so it is written over in place:
		// no moment without a mark.
		if _, err := f.WriteAt([]byte(line), 0); err != nil {
			return fmt.Errorf("fence: write %s: %w", side, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fence: sync %s: %w", side, err)
		}
	}
	if then != nil {
		return then()
	}
	return nil
}

// parseMark reads a sidecar's line.
func parseMark(s string) (name string, token uint64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	i := strings.LastIndexByte(line, '=')
	if i <= 0 {
		return "", 0, fmt.Errorf("not a mark: %q", line)
	}
	name, err = unescapeName(line[:i])
	if err != nil {
		return "", 0, fmt.Errorf("not a mark: %q", line)
	}
	token, err = strconv.ParseUint(line[i+1:], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("not a mark: %q", line)
	}
	return name, token, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fence: sync %s: %w", dir, err)
	}
	return nil
}
