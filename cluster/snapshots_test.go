package cluster

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestSnapshotsSecret: the snapshots, which hold the resume key, are mode
// 0600 in directories of mode 0700, whatever mode raft creates them with
// or an earlier run left.
func TestSnapshotsSecret(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	if err := os.MkdirAll(filepath.Join(dir, "snapshots", "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "snapshots", "old", "state.bin"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := newSecureSnapshots(dir, 2, func(dir string, retain int) (raft.SnapshotStore, error) {
		return raft.NewFileSnapshotStoreWithLogger(dir, retain, hclog.NewNullLogger())
	})
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("a")
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 3, raft.Configuration{}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte(`{"resume_key":"secret"}`))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	var seen int
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		seen++
		return nil
	})
	if seen < 6 {
		t.Fatalf("walked %d entries, want the store's and both snapshots'", seen)
	}
}
