package tokenstore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestResumeKeyMadeOnceAndKept: the first start makes a key of 32 random
// bytes in resume-key, mode 0600; later starts keep it and the generation,
// which NewGeneration raises durably.
func TestResumeKeyMadeOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, gen := s.ResumeKey()
	if len(key) != KeySize || bytes.Equal(key, make([]byte, KeySize)) || gen != 1 {
		t.Fatalf("key of %d bytes (zero %v), generation %d; want %d random bytes and generation 1", len(key), bytes.Equal(key, make([]byte, KeySize)), gen, KeySize)
	}
	fi, err := os.Stat(filepath.Join(dir, keyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("resume-key: %v, %v; want mode 0600", fi, err)
	}
	if g, err := s.NewGeneration(); err != nil || g != 2 {
		t.Fatalf("NewGeneration: %d, %v; want 2", g, err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	key2, gen2 := s2.ResumeKey()
	if !bytes.Equal(key, key2) || gen2 != 2 {
		t.Fatalf("after a restart: the same key %v, generation %d; want the same key and 2", bytes.Equal(key, key2), gen2)
	}
	if other, err := Open(t.TempDir()); err != nil || bytes.Equal(first(other.ResumeKey()), key) {
		t.Fatalf("another directory's key is the same (%v)", err)
	}
}

func first(b []byte, _ uint32) []byte { return b }

// TestResumeKeyGarbage: a key file that is not one stops the start, and
// its content is not in the message.
func TestResumeKeyGarbage(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	secret := "deadbeef-this-is-not-a-key"
	if err := os.WriteFile(filepath.Join(dir, keyFile), []byte(secret+"\n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	if err == nil || bytes.Contains([]byte(err.Error()), []byte(secret)) {
		t.Fatalf("Open with a garbage key: %v; want an error that does not quote the file", err)
	}
}

// TestTicketsRise: tickets rise within a run and across restarts, from a
// counter of their own (tokens do not skip for them).
func TestTicketsRise(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	a, tok, b := s.NextTicket(), s.Next(), s.NextTicket()
	if b <= a || a>>CounterBits != 1 || tok != 1<<CounterBits|1 {
		t.Fatalf("tickets %#x %#x, token %#x: want rising tickets of epoch 1 and the first token", a, b, tok)
	}
	s2, _ := Open(dir)
	if c := s2.NextTicket(); c <= b {
		t.Fatalf("first ticket after a restart %#x, want above %#x", c, b)
	}
}

// TestResumeListKeepsTheBound: after a clean stop that wrote a resume
// list, the lease bound is kept (a crash of the next run must wait for the
// listed claims), the list is there to read until dropped, and the start
// is planned (no grace); without a list the bound is dropped as before.
func TestResumeListKeepsTheBound(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	if err := s.NoteLease(7 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteResumeList([]byte("list")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, listFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("resume-list has mode %v, want 0600", fi.Mode().Perm())
	}
	if err := s.MarkClean(); err != nil {
		t.Fatal(err)
	}
	s2, _ := Open(dir)
	if !s2.Planned() || s2.Grace() != 0 || s2.LeaseBound() != 7*time.Second || string(s2.ResumeList()) != "list" {
		t.Fatalf("planned %v grace %v bound %v list %q; want a planned start keeping the bound 7s and the list", s2.Planned(), s2.Grace(), s2.LeaseBound(), s2.ResumeList())
	}
	if err := s2.DropResumeList(); err != nil {
		t.Fatal(err)
	}
	if err := s2.MarkClean(); err != nil {
		t.Fatal(err)
	}
	s3, _ := Open(dir)
	if !s3.Planned() || s3.LeaseBound() != 0 || s3.ResumeList() != nil {
		t.Fatalf("planned %v bound %v list %q; want the bound dropped with no list", s3.Planned(), s3.LeaseBound(), s3.ResumeList())
	}
	// A crash keeps the list and the bound: the next start waits.
	s3.NoteLease(3 * time.Second)
	s3.WriteResumeList([]byte("again"))
	s4, _ := Open(dir)
	if s4.Planned() || s4.Grace() != 3*time.Second || string(s4.ResumeList()) != "again" {
		t.Fatalf("after a crash: planned %v grace %v list %q; want a crash grace of 3s and the list", s4.Planned(), s4.Grace(), s4.ResumeList())
	}
}

// TestRecordsKept: records written are there at the next start; an empty
// write removes the file.
func TestRecordsKept(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	if err := s.WriteRecords([]byte("recs")); err != nil {
		t.Fatal(err)
	}
	s2, _ := Open(dir)
	if string(s2.Records()) != "recs" {
		t.Fatalf("records %q, want recs", s2.Records())
	}
	if err := s2.WriteRecords(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, recordsFile)); !os.IsNotExist(err) {
		t.Fatalf("revoked after an empty write: %v, want it removed", err)
	}
}
