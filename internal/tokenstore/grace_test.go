package tokenstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func noteLease(t *testing.T, s *Store, d time.Duration) {
	t.Helper()
	if err := s.NoteLease(d); err != nil {
		t.Fatalf("NoteLease(%v): %v", d, err)
	}
}

func leaseOnDisk(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, leaseFile))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestGraceAfterCrashAndCleanStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	if g := s.Grace(); g != 0 {
		t.Fatalf("first run: Grace %v, want 0", g)
	}
	noteLease(t, s, 2*time.Second)
	noteLease(t, s, time.Second) // smaller: not written
	noteLease(t, s, 3*time.Second)
	if got := leaseOnDisk(t, dir); got != "3000000000" {
		t.Fatalf("lease file holds %q, want 3000000000", got)
	}

	// A crash (no MarkClean): the next run waits for the longest lease,
	// and keeps that bound, so a crash during its grace period is covered.
	s = open(t, dir)
	if g := s.Grace(); g != 3*time.Second {
		t.Fatalf("after a crash: Grace %v, want 3s", g)
	}
	noteLease(t, s, time.Second)
	if got := leaseOnDisk(t, dir); got != "3000000000" {
		t.Fatalf("lease file holds %q after a smaller lease, want 3000000000", got)
	}
	s = open(t, dir)
	if g := s.Grace(); g != 3*time.Second {
		t.Fatalf("after a second crash: Grace %v, want 3s", g)
	}

	// A clean stop once the grace period is over: no grace, and the old
	// bound is forgotten.
	s.graceEnds = time.Time{}
	if err := s.MarkClean(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	if g := s.Grace(); g != 0 {
		t.Fatalf("after a clean stop: Grace %v, want 0", g)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanFile)); !os.IsNotExist(err) {
		t.Fatalf("clean marker still there after Open (stat: %v)", err)
	}
	if got := leaseOnDisk(t, dir); got != "" {
		t.Fatalf("lease file holds %q after a clean start, want none", got)
	}
	noteLease(t, s, time.Second)

	// This run crashes: its own bound applies, not the older one.
	s = open(t, dir)
	if g := s.Grace(); g != time.Second {
		t.Fatalf("after a crash: Grace %v, want 1s", g)
	}
	if e := onDiskEpoch(t, dir); e != s.Epoch() {
		t.Fatalf("epoch on disk %d, want %d", e, s.Epoch())
	}
}

// TestCleanStopDuringGrace: a run that starts after a crash and stops
// cleanly before its grace period is over leaves the next run the same
// grace: the clients of the crashed run were not told by that clean stop.
// (Found by the lock table's randomized schedules with restarts.)
func TestCleanStopDuringGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noteLease(t, open(t, dir), time.Hour) // crashes
	s := open(t, dir)
	if g := s.Grace(); g != time.Hour {
		t.Fatalf("after a crash: Grace %v, want 1h", g)
	}
	if err := s.MarkClean(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanFile)); !os.IsNotExist(err) {
		t.Fatalf("clean marker written during the grace period (stat: %v)", err)
	}
	if g := open(t, dir).Grace(); g != time.Hour {
		t.Fatalf("after a clean stop during the grace period: Grace %v, want 1h", g)
	}
}

func TestGraceCrashWithoutLease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open(t, dir)
	if g := open(t, dir).Grace(); g != 0 {
		t.Fatalf("after a crash with no session: Grace %v, want 0", g)
	}
}

func TestGarbageLeaseFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open(t, dir)
	if err := os.WriteFile(filepath.Join(dir, leaseFile), []byte("soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), leaseFile) {
		t.Fatalf("Open with a garbage lease file: error %v, want one naming %s", err, leaseFile)
	}
}

// TestNoteLeaseWriteFailure: a bound that cannot be made durable is
// refused, and not taken as recorded. The failure is made by a non-empty
// directory where the lease file must go, so the rename fails for root too
// (a read-only directory would not stop root, and CI runs as root).
func TestNoteLeaseWriteFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	blocker := filepath.Join(dir, leaseFile)
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteLease(time.Second); err == nil {
		t.Fatal("NoteLease with its file's path taken by a directory: no error")
	}
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	noteLease(t, s, time.Second) // the failed bound was not taken as recorded
	if got := leaseOnDisk(t, dir); got != "1000000000" {
		t.Fatalf("lease file holds %q, want 1000000000", got)
	}
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), ".") || strings.Contains(en.Name(), "tmp") {
			t.Errorf("data directory holds %q after the failed write, want the temporary file removed", en.Name())
		}
	}
}

// onDiskEpoch reads the epoch file alone (onDisk also wants no other file).
func onDiskEpoch(t *testing.T, dir string) uint64 {
	t.Helper()
	e, err := readEpoch(dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
