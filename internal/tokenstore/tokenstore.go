// Package tokenstore keeps fencing tokens rising across restarts and crashes
// without disk I/O per grant.
//
// A token is epoch<<CounterBits | counter. The epoch is the number of times
// the store has been opened on this data directory: Open reads the last
// epoch, adds one and makes the new value durable (write to a temporary
// file, fsync, rename, fsync the directory) before the first token is handed
// out. Every token of a run is therefore greater than every token of every
// earlier run, whether that run ended cleanly or with kill -9, and within a
// run the counter rises by one per grant in memory.
//
// The store also keeps what a restart needs to be safe after a crash (see
// Grace): the longest lease any session of the run has used (NoteLease,
// written only when it grows) and a marker that the run ended with a
// controlled shutdown (MarkClean, removed again by Open).
//
// Limits: 2^24-1 opens of one data directory, and 2^40 grants per epoch; a
// run that exhausts its counter moves to a new epoch, durably, on the grant
// that needs it (one fsync per 2^40 grants). Losing or rolling back the data
// directory loses the guarantee.
package tokenstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CounterBits is the number of low bits that count grants within an epoch.
const CounterBits = 40

const (
	maxEpoch   = 1<<(64-CounterBits) - 1
	maxCounter = 1<<CounterBits - 1
	epochFile  = "epoch"
	lockFile   = "lock"
	// leaseFile holds the longest lease of the run, in nanoseconds.
	leaseFile = "lease-bound"
	// cleanFile exists while no run is live and the last one shut down in
	// a controlled way.
	cleanFile = "clean-shutdown"
)

// Store hands out fencing tokens. It is safe for concurrent use.
type Store struct {
	dir     string
	mu      sync.Mutex
	epoch   uint64
	counter uint64
	lease   time.Duration // the bound in leaseFile
	grace   time.Duration // see Grace; set by Open
	// graceEnds is Open's time plus grace: until then, clients of the
	// crashed run may still believe in their locks (see MarkClean). It is
	// on time.Now's monotonic clock, which stops during a suspend of the
	// machine: a suspend makes MarkClean count less of the grace as
	// passed, so it only makes it more careful.
	graceEnds time.Time
	// What protocol version 3 keeps (resume.go).
	key        []byte
	generation uint32
	keyPerm    os.FileMode
	ticket     uint64 // the ticket counter of the epoch (NextTicket)
	planned    bool   // the run before ended with MarkClean
	list       []byte // the resume list, as in its file
	records    []byte // the records of ends, as in their file
}

// Open opens (creating if needed) the data directory dir and starts a new
// epoch there.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("tokenstore: data directory is empty")
	}
	if err := mkdirDurably(dir); err != nil {
		return nil, err
	}
	// Looked at before lockDir creates the lock file, which is one of the
	// signs of an earlier run.
	traces, err := runTraces(dir)
	if err != nil {
		return nil, err
	}
	if err := lockDir(dir); err != nil {
		return nil, err
	}
	prev, err := readEpoch(dir)
	if err != nil {
		return nil, err
	}
	hasEpoch, err := exists(filepath.Join(dir, epochFile))
	if err != nil {
		return nil, err
	}
	if !hasEpoch && len(traces) > 0 {
		// Starting at epoch 1 here would repeat the tokens of the runs that
		// left these files.
		return nil, fmt.Errorf("tokenstore: %s has no epoch file, but %s show that a server ran on it: "+
			"starting at epoch 1 could repeat tokens already granted. Write the highest epoch ever used "+
			"(the epoch= field of the start log line, or the highest token >> %d) into %s; "+
			"or, if no lock was ever granted from this directory, remove it",
			dir, strings.Join(traces, ", "), CounterBits, filepath.Join(dir, epochFile))
	}
	// Checked here, not only in moveTo: prev+1 wraps to 0 for the largest
	// uint64, which would restart tokens below every earlier one.
	if prev >= maxEpoch {
		return nil, fmt.Errorf("tokenstore: epoch %d in %s is at or above the limit of %d: no new epoch can start", prev, filepath.Join(dir, epochFile), uint64(maxEpoch))
	}
	clean, err := exists(filepath.Join(dir, cleanFile))
	if err != nil {
		return nil, err
	}
	bound, err := readLease(dir)
	if err != nil {
		return nil, err
	}
	list, err := exists(filepath.Join(dir, listFile))
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir}
	if err := s.moveTo(prev + 1); err != nil {
		return nil, err
	}
	if err := s.openResume(); err != nil {
		return nil, err
	}
	// The marker goes before the first grant of this run, so a crash of
	// this run is never taken for a clean end. After a clean end the old
	// bound is dropped: every client was told, so it protects nobody. After
	// a crash it is kept: clients of the crashed run may still believe in
	// their locks, and a crash of this run during its grace period must
	// leave the next run as careful. After a clean end that listed claims
	// of version 3 (listFile), the bound is kept too: those clients were
	// told to come back, and a crash of this run before they all did must
	// wait for them.
	switch {
	case clean && list:
		if err := removeDurably(dir, cleanFile); err != nil {
			return nil, err
		}
		s.lease, s.planned = bound, true
	case clean:
		if err := removeDurably(dir, cleanFile, leaseFile); err != nil {
			return nil, err
		}
		s.planned = true
	case prev > 0:
		s.lease, s.grace = bound, bound
		s.graceEnds = time.Now().Add(bound)
	}
	return s, nil
}

// LeaseBound is the longest lease recorded (NoteLease), as the run stands.
func (s *Store) LeaseBound() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// Grace is how long the run that Open started must grant no lock: the
// longest lease recorded by the previous run if that run did not end with
// MarkClean (a crash), else 0 (also for the first run on a directory, and
// after a crashed run that recorded no lease).
func (s *Store) Grace() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grace
}

// NoteLease records durably that a session holds or waits with lease d,
// before it may be granted. It writes (one fsync) only when d exceeds every
// lease recorded since the last clean start, so a run pays a handful of
// writes, not one per grant. It returns an error when the bound cannot be
// made durable; the session must then not be granted.
func (s *Store) NoteLease(d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= s.lease {
		return nil
	}
	if err := writeDurably(s.dir, leaseFile, []byte(strconv.FormatInt(int64(d), 10)+"\n")); err != nil {
		return err
	}
	s.lease = d
	return nil
}

// MarkClean records durably that the run ended with a controlled shutdown:
// every session was told, so the next Open needs no grace period. Call it
// only after the last session has ended; the next Open removes it.
//
// Before this run's grace period has passed it records nothing: the
// clients of the crashed run before it were told nothing by this shutdown
// and may still believe in their locks, so the next start must wait as
// after a crash (with the bound it keeps).
func (s *Store) MarkClean() error {
	s.mu.Lock()
	ends := s.graceEnds
	s.mu.Unlock()
	if time.Now().Before(ends) {
		return nil
	}
	return writeDurably(s.dir, cleanFile, nil)
}

// Epoch is the epoch of this run.
func (s *Store) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Next returns the next token: greater than every token returned before,
// in this run and in every earlier run on the same directory. It panics if
// no token can be made durable, since granting a lock with a token that
// might repeat would break the fencing promise.
func (s *Store) Next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counter == maxCounter {
		if err := s.moveTo(s.epoch + 1); err != nil {
			panic(err)
		}
	}
	s.counter++
	return s.epoch<<CounterBits | s.counter
}

// moveTo makes epoch e durable and starts its counter. mu must be held, or
// the store not yet shared.
func (s *Store) moveTo(e uint64) error {
	if e > maxEpoch {
		return fmt.Errorf("tokenstore: epoch %d exceeds the limit of %d in %s", e, uint64(maxEpoch), s.dir)
	}
	if err := writeDurably(s.dir, epochFile, []byte(strconv.FormatUint(e, 10)+"\n")); err != nil {
		return err
	}
	s.epoch, s.counter, s.ticket = e, 0, 0
	return nil
}

// runTraces lists the files of dir, other than the epoch file, that only a
// run of the server leaves there: the lock file (created at every start, on
// unix) and the files of the crash recovery grace. A directory that holds
// one of them but no epoch file has lost its epoch.
func runTraces(dir string) ([]string, error) {
	var found []string
	for _, name := range []string{lockFile, leaseFile, cleanFile, keyFile, listFile, recordsFile} {
		ok, err := exists(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if ok {
			found = append(found, name)
		}
	}
	return found, nil
}

func readEpoch(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, epochFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tokenstore: %w", err)
	}
	e, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("tokenstore: %s holds %q, not an epoch: %w", filepath.Join(dir, epochFile), b, err)
	}
	return e, nil
}

func readLease(dir string) (time.Duration, error) {
	name := filepath.Join(dir, leaseFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tokenstore: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("tokenstore: %s holds %q, not a lease in nanoseconds", name, b)
	}
	return time.Duration(n), nil
}

func exists(name string) (bool, error) {
	_, err := os.Lstat(name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("tokenstore: %w", err)
}

// removeDurably removes the files names of dir (those that exist) and makes
// their removal durable.
func removeDurably(dir string, names ...string) error {
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tokenstore: %w", err)
		}
	}
	return syncDir(dir)
}

// writeDurably replaces dir/name with data so that after a crash the file
// holds either the old or the new content, and the new one once it returns.
func writeDurably(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return fmt.Errorf("tokenstore: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("tokenstore: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("tokenstore: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tokenstore: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("tokenstore: %w", err)
	}
	return syncDir(dir)
}

// mkdirDurably creates dir and its missing parents, and syncs the parent of
// each one it creates: the epoch file's own fsyncs do not make a new
// directory's entry durable, and losing it in a crash would lose the epoch.
func mkdirDurably(dir string) error {
	var created []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		created = append(created, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tokenstore: %w", err)
	}
	for _, p := range created {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tokenstore: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("tokenstore: sync %s: %w", dir, err)
	}
	return nil
}
