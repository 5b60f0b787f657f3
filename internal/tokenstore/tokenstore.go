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
)

// CounterBits is the number of low bits that count grants within an epoch.
const CounterBits = 40

const (
	maxEpoch   = 1<<(64-CounterBits) - 1
	maxCounter = 1<<CounterBits - 1
	epochFile  = "epoch"
)

// Store hands out fencing tokens. It is safe for concurrent use.
type Store struct {
	dir     string
	mu      sync.Mutex
	epoch   uint64
	counter uint64
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
	prev, err := readEpoch(dir)
	if err != nil {
		return nil, err
	}
	// Checked here, not only in moveTo: prev+1 wraps to 0 for the largest
	// uint64, which would restart tokens below every earlier one.
	if prev >= maxEpoch {
		return nil, fmt.Errorf("tokenstore: epoch %d in %s is at or above the limit of %d: no new epoch can start", prev, filepath.Join(dir, epochFile), uint64(maxEpoch))
	}
	s := &Store{dir: dir}
	if err := s.moveTo(prev + 1); err != nil {
		return nil, err
	}
	return s, nil
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
	s.epoch, s.counter = e, 0
	return nil
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
