package tokenstore

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// open opens a store on dir and fails the test on an error.
func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

// writeEpoch puts content in dir's epoch file, as an earlier run would have.
func writeEpoch(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, epochFile), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// onDisk is the epoch the file holds; it also checks that nothing else,
// such as a temporary file, is left in dir.
func onDisk(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, epochFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("epoch file holds %q, want a number and a newline", b)
	}
	e, err := strconv.ParseUint(string(b[:len(b)-1]), 10, 64)
	if err != nil {
		t.Fatalf("epoch file holds %q: %v", b, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		// The directory lock (on unix), and the resume key, made by the
		// first Open that gets that far.
		if en.Name() != lockFile && en.Name() != keyFile {
			names = append(names, en.Name())
		}
	}
	if len(names) != 1 || names[0] != epochFile {
		t.Fatalf("data directory holds %v (besides %q and %q), want only %q", names, lockFile, keyFile, epochFile)
	}
	return e
}

// take returns n tokens and checks that each is greater than the last and
// than after.
func take(t *testing.T, s *Store, n int, after uint64) []uint64 {
	t.Helper()
	out := make([]uint64, n)
	last := after
	for i := range out {
		tok := s.Next()
		if tok <= last {
			t.Fatalf("token %d: got %#x, want more than %#x", i, tok, last)
		}
		out[i], last = tok, tok
	}
	return out
}

func TestTokensRiseWithinARun(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if got := s.Epoch(); got != 1 {
		t.Fatalf("Epoch of a new directory: got %d, want 1", got)
	}
	toks := take(t, s, 10_000, 0)
	if want := uint64(1)<<CounterBits | 1; toks[0] != want {
		t.Errorf("first token: got %#x, want %#x", toks[0], want)
	}
	if want := uint64(1)<<CounterBits | 10_000; toks[len(toks)-1] != want {
		t.Errorf("last token: got %#x, want %#x", toks[len(toks)-1], want)
	}
	// The epoch is durable before the first token, and no grant writes.
	if got := onDisk(t, dir); got != 1 {
		t.Errorf("epoch on disk: got %d, want 1", got)
	}
}

func TestRestart(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for run := uint64(1); run <= 5; run++ {
		// The earlier store is simply dropped, as kill -9 would leave it:
		// it has nothing to flush and no Close.
		s := open(t, dir)
		if s.Epoch() != run {
			t.Fatalf("run %d: got epoch %d, want %d", run, s.Epoch(), run)
		}
		if got := onDisk(t, dir); got != run {
			t.Fatalf("run %d: epoch on disk %d, want %d", run, got, run)
		}
		toks := take(t, s, 1+int(run)*100, last)
		last = toks[len(toks)-1]
	}
}

func TestSecondOpenWhileFirstIsLive(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir)
	before := take(t, first, 50, 0)
	second := open(t, dir)
	if second.Epoch() <= first.Epoch() {
		t.Fatalf("epochs: got %d then %d, want the second greater", first.Epoch(), second.Epoch())
	}
	// Every token of the second run beats every token of the first, even
	// ones the first hands out after the second opened.
	after := take(t, first, 50, before[len(before)-1])
	toks := take(t, second, 50, 0)
	if max := after[len(after)-1]; toks[0] <= max {
		t.Fatalf("second run's first token %#x, want more than the first run's last %#x", toks[0], max)
	}
}

func TestOpenCreatesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := open(t, dir)
	if s.Epoch() != 1 || onDisk(t, dir) != 1 {
		t.Fatalf("got epoch %d, want 1", s.Epoch())
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("data directory mode %v, want no group or other access", perm)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(""); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("Open(\"\"): got %v, want an error naming the empty directory", err)
	}
	// A file where the directory should be.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file); err == nil {
		t.Errorf("Open(a regular file): got nil, want an error")
	}
	// A directory where the epoch file should be.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, epochFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir); err == nil {
		t.Errorf("Open with a directory named epoch: got epoch %d, want an error", s.Epoch())
	}
}

func TestGarbageEpochFile(t *testing.T) {
	for _, content := range []string{
		"",
		"\n",
		"garbage",
		"12abc\n",
		"-1\n",
		"+3\n",
		"1.5\n",
		"0x10\n",
		"1 2\n",
		"18446744073709551616\n", // 2^64
		"\x00\x00\x00\x01",
	} {
		t.Run(strconv.Quote(content), func(t *testing.T) {
			dir := t.TempDir()
			writeEpoch(t, dir, content)
			s, err := Open(dir)
			if err == nil {
				t.Fatalf("got a store at epoch %d, want an error", s.Epoch())
			}
			// The error names the file and says what is wrong with it.
			if msg := err.Error(); !strings.Contains(msg, filepath.Join(dir, epochFile)) || !strings.Contains(msg, "not an epoch") {
				t.Errorf("got error %q, want one naming %s and saying \"not an epoch\"", msg, filepath.Join(dir, epochFile))
			}
			// The file is left as it was, for the operator to look at.
			if b, _ := os.ReadFile(filepath.Join(dir, epochFile)); string(b) != content {
				t.Errorf("epoch file now holds %q, want it untouched %q", b, content)
			}
		})
	}
}

func TestEpochFileFormats(t *testing.T) {
	// What the store writes, and what a person might leave there by hand.
	for content, want := range map[string]uint64{
		"0":          1,
		"7":          8,
		"7\n":        8,
		" 7 \r\n":    8,
		"000041\n":   42,
		"16777213":   maxEpoch - 1,
		"16777214\n": maxEpoch,
	} {
		dir := t.TempDir()
		writeEpoch(t, dir, content)
		s := open(t, dir)
		if s.Epoch() != want || onDisk(t, dir) != want {
			t.Errorf("epoch file %q: got epoch %d, want %d", content, s.Epoch(), want)
		}
	}
}

func TestEpochAtTheLimit(t *testing.T) {
	for _, e := range []uint64{maxEpoch, maxEpoch + 1, 1 << 40, math.MaxUint64 - 1, math.MaxUint64} {
		t.Run(strconv.FormatUint(e, 10), func(t *testing.T) {
			dir := t.TempDir()
			writeEpoch(t, dir, strconv.FormatUint(e, 10)+"\n")
			s, err := Open(dir)
			if err == nil {
				// A store here would hand out tokens lower than earlier runs'.
				t.Fatalf("got a store at epoch %d (first token %#x), want an error", s.Epoch(), s.Next())
			}
			if !strings.Contains(err.Error(), "limit") {
				t.Errorf("got error %q, want one about the limit", err)
			}
			if got := onDisk(t, dir); got != e {
				t.Errorf("epoch on disk: got %d, want it untouched %d", got, e)
			}
		})
	}
}

func TestCounterRollover(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	prev := take(t, s, 3, 0)
	s.counter = maxCounter - 2 // as after 2^40-3 grants
	toks := take(t, s, 4, prev[len(prev)-1])
	want := []uint64{
		1<<CounterBits | (maxCounter - 1),
		1<<CounterBits | maxCounter,
		2<<CounterBits | 1,
		2<<CounterBits | 2,
	}
	if !slices.Equal(toks, want) {
		t.Fatalf("tokens across the rollover: got %#x, want %#x", toks, want)
	}
	if s.Epoch() != 2 {
		t.Errorf("Epoch after the rollover: got %d, want 2", s.Epoch())
	}
	// The new epoch was made durable when it was entered: a restart now
	// goes past it.
	if got := onDisk(t, dir); got != 2 {
		t.Fatalf("epoch on disk after the rollover: got %d, want 2", got)
	}
	again := open(t, dir)
	if again.Epoch() != 3 {
		t.Fatalf("Epoch after a restart: got %d, want 3", again.Epoch())
	}
	take(t, again, 1, toks[len(toks)-1])
}

// mustPanic runs f and returns what it panicked with.
func mustPanic(t *testing.T, f func()) (v any) {
	t.Helper()
	defer func() {
		v = recover()
		if v == nil {
			t.Fatalf("did not panic")
		}
	}()
	f()
	return nil
}

func TestRolloverPastTheLastEpochPanics(t *testing.T) {
	dir := t.TempDir()
	writeEpoch(t, dir, strconv.FormatUint(maxEpoch-1, 10))
	s := open(t, dir)
	if s.Epoch() != maxEpoch {
		t.Fatalf("got epoch %d, want %d", s.Epoch(), maxEpoch)
	}
	last := take(t, s, 1, 0)[0]
	s.counter = maxCounter
	v := mustPanic(t, func() { s.Next() })
	if err, ok := v.(error); !ok || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("panic: got %v, want an error about the epoch limit", v)
	}
	// Nothing was handed out or changed: the next call panics again.
	if s.Epoch() != maxEpoch || s.counter != maxCounter || onDisk(t, dir) != maxEpoch {
		t.Fatalf("after the panic: epoch %d counter %#x, want %d and %#x", s.Epoch(), s.counter, uint64(maxEpoch), uint64(maxCounter))
	}
	mustPanic(t, func() { s.Next() })
	if last != maxEpoch<<CounterBits|1 {
		t.Fatalf("token at the last epoch: got %#x, want %#x", last, uint64(maxEpoch<<CounterBits|1))
	}
}

func TestRolloverWriteFailurePanics(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	// Make the epoch file impossible to replace: a non-empty directory
	// takes its name, so the rename fails (even for root).
	if err := os.Remove(filepath.Join(dir, epochFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, epochFile, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	s.counter = maxCounter
	v := mustPanic(t, func() { s.Next() })
	if _, ok := v.(error); !ok {
		t.Fatalf("panic: got %v (%T), want the write's error", v, v)
	}
	if s.Epoch() != 1 || s.counter != maxCounter {
		t.Fatalf("after the failed rollover: epoch %d counter %#x, want 1 and %#x (no token handed out)", s.Epoch(), s.counter, uint64(maxCounter))
	}
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if en.Name() != epochFile && en.Name() != lockFile && en.Name() != keyFile {
			t.Fatalf("data directory holds %q, want the temporary file removed", en.Name())
		}
	}
}

func TestConcurrentNext(t *testing.T) {
	const workers, each = 8, 2000
	s := open(t, t.TempDir())
	got := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			toks := make([]uint64, each)
			for i := range toks {
				toks[i] = s.Next()
			}
			got[w] = toks
		})
	}
	wg.Wait()
	var all []uint64
	for w, toks := range got {
		for i := 1; i < len(toks); i++ {
			if toks[i] <= toks[i-1] {
				t.Fatalf("worker %d, token %d: got %#x after %#x, want rising", w, i, toks[i], toks[i-1])
			}
		}
		all = append(all, toks...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("token %#x handed out twice", all[i])
		}
	}
	// Unique and no gaps: exactly the first workers*each of the epoch.
	if first, last := all[0], all[len(all)-1]; first != 1<<CounterBits|1 || last != 1<<CounterBits|workers*each {
		t.Fatalf("tokens: got %#x .. %#x, want %#x .. %#x", first, last, uint64(1<<CounterBits|1), uint64(1<<CounterBits|workers*each))
	}
}

func BenchmarkNext(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Next()
	}
}

// TestDeletedEpochFileRefusesToStart: a used directory whose epoch file is
// gone must not start again at epoch 1, whatever the earlier runs left
// beside it: each file a run leaves is a sign of use on its own.
func TestDeletedEpochFileRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string) // leaves a used directory
	}{
		{"after a crash", func(t *testing.T, dir string) {
			s := open(t, dir)
			take(t, s, 3, 0)
			if err := s.NoteLease(2e9); err != nil {
				t.Fatal(err)
			}
		}},
		{"after a clean shutdown", func(t *testing.T, dir string) {
			s := open(t, dir)
			take(t, s, 3, 0)
			if err := s.MarkClean(); err != nil {
				t.Fatal(err)
			}
		}},
		{"after a run that noted nothing", func(t *testing.T, dir string) {
			open(t, dir)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.prepare(t, dir)
			if entries, _ := os.ReadDir(dir); len(entries) < 2 {
				t.Skip("this platform's runs leave no lock file")
			}
			if err := os.Remove(filepath.Join(dir, epochFile)); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				t.Fatalf("Open with the epoch file deleted: got epoch %d, want an error", s.Epoch())
			}
			for _, want := range []string{"no epoch file", filepath.Join(dir, epochFile)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if _, serr := os.Stat(filepath.Join(dir, epochFile)); serr == nil {
				t.Errorf("the refused Open wrote an epoch file")
			}
			// Restoring the epoch, as the message says, starts above it.
			writeEpoch(t, dir, "7\n")
			if s := open(t, dir); s.Epoch() != 8 {
				t.Errorf("after restoring epoch 7: got epoch %d, want 8", s.Epoch())
			}
		})
	}
	// A fresh directory, or an empty one made for the server, is not used.
	empty := t.TempDir()
	if s := open(t, empty); s.Epoch() != 1 {
		t.Errorf("empty directory: got epoch %d, want 1", s.Epoch())
	}
}
