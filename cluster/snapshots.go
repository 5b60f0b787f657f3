package cluster

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// The replicated state holds the resume key, so the snapshots that hold
// it are kept as secret as raft.db (which bbolt makes 0600): hashicorp/raft
// creates them with os.Create (0644 under the usual umask) in directories
// of mode 0755. Its directory (raft/snapshots) is made 0700 when the store
// opens, before any snapshot of this run is written, so nobody else can
// reach a file even for the moment it has raft's mode, and every snapshot
// file is made 0600 once written.

// secureSnapshots is a file snapshot store whose snapshots are mode 0600
// in directories of mode 0700.
type secureSnapshots struct {
	raft.SnapshotStore
	dir string // raft/snapshots
}

// newSecureSnapshots opens the file snapshot store in dir (its snapshots
// in dir/snapshots) and tightens what an earlier run left.
func newSecureSnapshots(dir string, retain int, store func(string, int) (raft.SnapshotStore, error)) (*secureSnapshots, error) {
	s, err := store(dir, retain)
	if err != nil {
		return nil, err
	}
	snaps := filepath.Join(dir, "snapshots")
	for _, d := range []string{dir, snaps} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := tighten(snaps); err != nil {
		return nil, err
	}
	return &secureSnapshots{SnapshotStore: s, dir: snaps}, nil
}

// tighten makes every directory under root 0700 and every file 0600.
func tighten(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o700)
		}
		return os.Chmod(p, 0o600)
	})
}

func (s *secureSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &secureSink{SnapshotSink: sink, dir: s.dir}, nil
}

// secureSink tightens its snapshot's directory once written.
type secureSink struct {
	raft.SnapshotSink
	dir string
}

func (s *secureSink) Close() error {
	err := s.SnapshotSink.Close()
	if err == nil {
		err = tighten(filepath.Join(s.dir, s.ID()))
	}
	return err
}
