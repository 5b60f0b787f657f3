package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// A voter's Raft state must never go back: a vote it forgets lets it vote
// twice in one term, and an entry it acknowledged and lost can leave a
// commit without its quorum, so that its vote elects a leader that misses
// committed entries (a lower epoch: fencing tokens go back; a lower lease
// bound: a grace too short). The log and the term live in raft.db; a copy
// of raft.db put back from an older backup holds less than the node
// acknowledged, and nothing in it says so.
//
// So every node keeps, beside raft.db and written before Raft hears that
// a write is done, a mark of the most it has acknowledged: its current
// term, the term of its latest vote, and its log's last entry (raft/
// log-mark.json). A node whose raft.db is behind its mark, or that has a
// mark and no log at all, refuses to start. Raft writes rarely here (a
// few entries per leadership, a term per election), so the mark's write
// costs nothing that matters.
//
// Its limit: a data directory put back whole (raft.db and the mark from
// the same older backup) agrees with itself. Only the other nodes could
// tell, and they keep no record of what each member acknowledged.

// logMarkFile is the mark, in the Raft directory.
const logMarkFile = "log-mark.json"

// logMark is the most this node's Raft stores have held.
type logMark struct {
	// Term is the highest current term stored, VoteTerm that of the
	// latest vote.
	Term     uint64 `json:"term"`
	VoteTerm uint64 `json:"vote_term"`
	// LastIndex and LastTerm are the log's last entry. Unlike the terms
	// they may go down: Raft drops a suffix of entries that conflict
	// with a new leader's (never committed ones), and the mark follows it
	// down before the entries go.
	LastIndex uint64 `json:"last_index"`
	LastTerm  uint64 `json:"last_term"`
}

func (m logMark) zero() bool { return m == logMark{} }

// behind reports whether s holds less than m: a lower term or vote term,
// or a log that is less up to date (Raft's order: the last entry's term,
// then its index).
func (s logMark) behind(m logMark) bool {
	return s.Term < m.Term || s.VoteTerm < m.VoteTerm ||
		s.LastTerm < m.LastTerm || (s.LastTerm == m.LastTerm && s.LastIndex < m.LastIndex)
}

func (m logMark) String() string {
	return fmt.Sprintf("term %d, vote in term %d, last entry %d of term %d", m.Term, m.VoteTerm, m.LastIndex, m.LastTerm)
}

// ErrRolledBack is the refusal of a node whose Raft state is behind what
// it once acknowledged.
var ErrRolledBack = errors.New("this node's Raft log or term is behind what it acknowledged")

// Raft's own keys in the stable store.
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
)

// readLogMark reads dir's mark; ok is false if there is none.
func readLogMark(dir string) (m logMark, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, logMarkFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, false, fmt.Errorf("%s: %w", filepath.Join(dir, logMarkFile), err)
	}
	return m, true, nil
}

func writeLogMark(dir string, m logMark) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeFileDurably(dir, logMarkFile, append(b, '\n'))
}

// storedMark is what logs, stable and snaps hold now, in the mark's terms.
func storedMark(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (logMark, error) {
	var s logMark
	var err error
	if s.Term, err = storedUint64(stable, keyCurrentTerm); err != nil {
		return s, err
	}
	if s.VoteTerm, err = storedUint64(stable, keyLastVoteTerm); err != nil {
		return s, err
	}
	if s.LastIndex, err = logs.LastIndex(); err != nil {
		return s, err
	}
	if s.LastIndex > 0 {
		var e raft.Log
		if err := logs.GetLog(s.LastIndex, &e); err != nil {
			return s, fmt.Errorf("read log entry %d: %w", s.LastIndex, err)
		}
		s.LastTerm = e.Term
	}
	// As Raft does: the snapshot's last entry if it is later.
	metas, err := snaps.List()
	if err != nil {
		return s, err
	}
	if len(metas) > 0 && metas[0].Index > s.LastIndex {
		s.LastIndex, s.LastTerm = metas[0].Index, metas[0].Term
	}
	return s, nil
}

// storedUint64 is key's value in stable, 0 if it was never set: a member
// that never voted has no vote term. raft-boltdb reports a missing key as
// an error that hashicorp/raft itself recognises by its text.
func storedUint64(stable raft.StableStore, key []byte) (uint64, error) {
	v, err := stable.GetUint64(key)
	if err != nil && err.Error() == "not found" {
		return 0, nil
	}
	return v, err
}

// checkDataDir refuses a data directory that holds less than this node
// once acknowledged: Raft state behind the mark (ErrRolledBack), or none
// at all where the mark, or the cluster's record (cluster.json), says
// that this node held the log (ErrLostData). It returns the mark to go
// on from; a node with state and no mark yet (a first start of this
// version) gets one from its state.
func checkDataDir(cfg Config, dir string, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (logMark, error) {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return logMark{}, fmt.Errorf("cluster: read raft state: %w", err)
	}
	m, ok, err := readLogMark(dir)
	if err != nil {
		return logMark{}, fmt.Errorf("cluster: %w", err)
	}
	if !has {
		if ok && !m.zero() {
			return logMark{}, fmt.Errorf("%w: %s says it acknowledged the log (%v), and %s has no Raft state now. %s",
				ErrLostData, filepath.Join(dir, logMarkFile), m, dir, wayBack(cfg))
		}
		rec, err := readMarker(dir)
		if err != nil {
			return logMark{}, fmt.Errorf("cluster: %w", err)
		}
		if slices.Contains(rec.Joined, cfg.NodeID) {
			return logMark{}, fmt.Errorf("%w: %s records node %q as holding the log of cluster %s, and %s has no Raft state now. %s",
				ErrLostData, filepath.Join(dir, markerFile), cfg.NodeID, clusterName(rec.ClusterID), dir, wayBack(cfg))
		}
		return logMark{}, nil
	}
	s, err := storedMark(logs, stable, snaps)
	if err != nil {
		return logMark{}, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if !ok {
		if err := writeLogMark(dir, s); err != nil {
			return logMark{}, fmt.Errorf("cluster: %w", err)
		}
		return s, nil
	}
	if s.behind(m) {
		return logMark{}, fmt.Errorf("%w: raft.db in %s holds %v, but this node acknowledged %v (%s): the Raft state was rolled back (a copy of raft.db from an older backup?). %s",
			ErrRolledBack, dir, s, m, logMarkFile, wayBack(cfg))
	}
	return m, nil
}

// wayBack says how a node that lost what it held comes back.
func wayBack(cfg Config) string {
	return fmt.Sprintf("A member that lost its Raft state must not come back under its id (its vote could elect a leader that misses committed entries, "+
		"and fencing tokens could go back). Remove it (baton cluster remove %s), then start this node with a new -node-id, -join and an empty -data-dir, "+
		"and add it (baton cluster add NEW-ID %s)", cfg.NodeID, cfg.RaftAddr)
}

// markedStores is Raft's log and stable store that move the mark with
// every write, before the write is reported done (and so before Raft
// acknowledges it to anyone). A failed mark fails the write.
type markedStores struct {
	raft.LogStore
	stable raft.StableStore
	dir    string

	mu sync.Mutex
	m  logMark
}

var (
	_ raft.LogStore    = (*markedStores)(nil)
	_ raft.StableStore = (*markedStores)(nil)
)

func newMarkedStores(dir string, logs raft.LogStore, stable raft.StableStore, m logMark) *markedStores {
	return &markedStores{LogStore: logs, stable: stable, dir: dir, m: m}
}

// setLocked writes m as the mark. mu must be held.
func (s *markedStores) setLocked(m logMark) error {
	if m == s.m {
		return nil
	}
	if err := writeLogMark(s.dir, m); err != nil {
		return fmt.Errorf("cluster: keep the log mark: %w", err)
	}
	s.m = m
	return nil
}

func (s *markedStores) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *markedStores) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	// Raft appends at the end of the log: the last one stored is its
	// last entry.
	last := logs[len(logs)-1]
	m := s.m
	m.LastIndex, m.LastTerm = last.Index, last.Term
	return s.setLocked(m)
}

// DeleteRange lowers the mark first when the range ends the log (Raft
// dropping entries that conflict with a new leader's, which were never
// committed); dropping a prefix (compaction) leaves it.
func (s *markedStores) DeleteRange(lo, hi uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, err := s.LogStore.LastIndex()
	if err != nil {
		return err
	}
	if hi >= last && lo <= last {
		m := s.m
		m.LastIndex, m.LastTerm = 0, 0
		if first, err := s.LogStore.FirstIndex(); err == nil && lo > first {
			var e raft.Log
			if s.LogStore.GetLog(lo-1, &e) == nil {
				m.LastIndex, m.LastTerm = e.Index, e.Term
			}
		}
		if err := s.setLocked(m); err != nil {
			return err
		}
	}
	return s.LogStore.DeleteRange(lo, hi)
}

func (s *markedStores) Set(key, val []byte) error      { return s.stable.Set(key, val) }
func (s *markedStores) Get(key []byte) ([]byte, error) { return s.stable.Get(key) }
func (s *markedStores) GetUint64(key []byte) (uint64, error) {
	return s.stable.GetUint64(key)
}

func (s *markedStores) SetUint64(key []byte, val uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stable.SetUint64(key, val); err != nil {
		return err
	}
	m := s.m
	switch string(key) {
	case string(keyCurrentTerm):
		m.Term = max(m.Term, val)
	case string(keyLastVoteTerm):
		m.VoteTerm = max(m.VoteTerm, val)
	}
	return s.setLocked(m)
}

// writeFileDurably replaces dir/name with b: a temporary file, fsync,
// rename, fsync of the directory.
func writeFileDurably(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
