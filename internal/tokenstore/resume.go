package tokenstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What protocol version 3 keeps in the data directory (docs/protocol.md,
// section 14): the key that credentials are computed with and the current
// generation; the list of claims a controlled shutdown handed to the next
// start; and the records of claims an operator or a conflict ended.
const (
	// keyFile holds the resume key, in hex, and the current generation,
	// one per line. Mode 0600: whoever reads it can forge a credential.
	keyFile = "resume-key"
	// listFile holds the claims a controlled shutdown listed (the server's
	// encoding), until every one of them is accounted for.
	listFile = "resume-list"
	// recordsFile holds the records of ends (the server's encoding): an
	// operator's release or kick of a claim, or a conflict it lost.
	recordsFile = "revoked"
)

// KeySize is the size of the resume key.
const KeySize = 32

// maxGeneration is the last generation: a u32 on the wire, never 0.
const maxGeneration = 1<<32 - 1

// openResume reads (creating the key at the first start) what version 3
// keeps in s.dir. s.mu need not be held: the store is not yet shared.
func (s *Store) openResume() error {
	key, gen, err := readKey(s.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		key = make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("tokenstore: resume key: %w", err)
		}
		gen = 1
		if err := writeKey(s.dir, key, gen); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	s.key, s.generation = key, gen
	if fi, err := os.Stat(filepath.Join(s.dir, keyFile)); err == nil {
		s.keyPerm = fi.Mode().Perm()
	}
	if s.list, err = readOptional(s.dir, listFile); err != nil {
		return err
	}
	if s.records, err = readOptional(s.dir, recordsFile); err != nil {
		return err
	}
	return nil
}

// ResumeKey is the key credentials are computed with, and the current
// generation. The key was made (32 random bytes) by the first start on the
// directory; the caller must not change the slice.
func (s *Store) ResumeKey() (key []byte, generation uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key, s.generation
}

// KeyPerm is the permission bits of the key file as Open found them: a
// file that others may read gives away every claim's credential.
func (s *Store) KeyPerm() os.FileMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keyPerm
}

// NewGeneration starts the next generation of credentials, durably (one
// fsync), and returns it: no credential of it may be given before.
func (s *Store) NewGeneration() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.generation == maxGeneration {
		return s.generation, fmt.Errorf("tokenstore: generation %d is the last one", s.generation)
	}
	if err := writeKey(s.dir, s.key, s.generation+1); err != nil {
		return s.generation, err
	}
	s.generation++
	return s.generation, nil
}

// NextTicket returns the next ticket, a waiter's place: epoch<<CounterBits
// | counter, as a token, from a counter of its own, so that every ticket of
// a run is above every ticket of the runs before. A counter that runs out
// moves the run to the next epoch, as Next does.
func (s *Store) NextTicket() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ticket == maxCounter {
		if err := s.moveTo(s.epoch + 1); err != nil {
			panic(err)
		}
	}
	s.ticket++
	return s.epoch<<CounterBits | s.ticket
}

// Planned reports whether the run before this one ended with a controlled
// shutdown that needs no crash grace (MarkClean): its resume list, if any,
// is then a planned handover's.
func (s *Store) Planned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.planned
}

// ResumeList is the list of claims that an earlier run wrote with
// WriteResumeList and nothing has dropped since; nil if none.
func (s *Store) ResumeList() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list
}

// WriteResumeList records the claims a controlled shutdown hands to the
// next start, durably (mode 0600), before MarkClean.
func (s *Store) WriteResumeList(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := writeDurably(s.dir, listFile, b); err != nil {
		return err
	}
	s.list = b
	return nil
}

// DropResumeList removes the list once every claim of it is accounted for.
func (s *Store) DropResumeList() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.list == nil {
		return nil
	}
	if err := removeDurably(s.dir, listFile); err != nil {
		return err
	}
	s.list = nil
	return nil
}

// Records is the records of ends as last written; nil if none.
func (s *Store) Records() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records
}

// WriteRecords replaces the records of ends, durably (mode 0600); an empty
// b removes the file.
func (s *Store) WriteRecords(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(b) == 0 {
		if err := removeDurably(s.dir, recordsFile); err != nil {
			return err
		}
		s.records = nil
		return nil
	}
	if err := writeDurably(s.dir, recordsFile, b); err != nil {
		return err
	}
	s.records = b
	return nil
}

func readKey(dir string) ([]byte, uint32, error) {
	name := filepath.Join(dir, keyFile)
	b, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("tokenstore: %w", err)
	}
	// No content in the message: the file is a secret.
	bad := fmt.Errorf("tokenstore: %s is not a resume key (a line of %d hex digits, then the generation): restore it from a backup, or remove it, which makes every claim's credential worthless", name, 2*KeySize)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		return nil, 0, bad
	}
	key, err := hex.DecodeString(strings.TrimSpace(lines[0]))
	if err != nil || len(key) != KeySize {
		return nil, 0, bad
	}
	gen, err := strconv.ParseUint(strings.TrimSpace(lines[1]), 10, 32)
	if err != nil || gen == 0 {
		return nil, 0, bad
	}
	return key, uint32(gen), nil
}

// writeKey replaces the key file; writeDurably creates it with mode 0600.
func writeKey(dir string, key []byte, gen uint32) error {
	return writeDurably(dir, keyFile, []byte(hex.EncodeToString(key)+"\n"+strconv.FormatUint(uint64(gen), 10)+"\n"))
}

// readOptional reads dir/name, nil if it does not exist.
func readOptional(dir, name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenstore: %w", err)
	}
	return b, nil
}
