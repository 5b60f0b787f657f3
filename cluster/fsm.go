package cluster

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/server"
)

// The replicated state is small on purpose: what a new leader needs to be
// safe, nothing of the lock table (which lives in the leader's memory).
// Membership is Raft's own configuration, not part of it.
//
// The grace invariant it keeps (docs/operations.md states it for
// reviewers): every epoch records the grace it inherited; the next epoch's
// grace is never shorter than what any client of an earlier leader may
// still believe. After a crash that is the lease bound plus twice the
// longest leader lease, and, unless the crashed epoch's leader recorded
// that it served its own grace whole, never less than the grace that epoch
// inherited. After a planned handoff it is what the handing-over
// leader committed, which covers its own holders that did not close and
// the rest of its own inherited grace. The bound is never lowered by an
// epoch inside its grace, and every command that changes the grace's
// inputs names its epoch: one from an epoch that is no longer current is
// ignored.

// Command kinds of the log.
const (
	// opEpoch: a new leader takes the next epoch. It consumes the handoff
	// (if it belongs to the epoch before), records the grace the new epoch
	// inherits and the leader's advertised addresses.
	opEpoch = "epoch"
	// opBound: set the lease bound (raise before a longer lease is queued,
	// or lower lazily). Ignored unless Epoch is the current epoch.
	opBound = "bound"
	// opHandoff: a leader stopping on purpose records how long its clients
	// may still believe in their locks. Ignored unless Epoch is current.
	opHandoff = "handoff"
	// opJoined: members that hold the log (acknowledged an epoch entry);
	// such a member that loses its data must not rejoin under its id.
	opJoined = "joined"
	// opServed: the leader of Epoch has served its whole grace: what its
	// epoch inherited is discharged, and a crash from now on leaves only
	// its own clients to cover. Ignored unless Epoch is current. It drops
	// the records of ends and the planned list of earlier epochs: no claim
	// of theirs can come back any more.
	opServed = "served"

	// Protocol version 3 (docs/protocol.md, section 14).
	//
	// opSpeaks: members (Members) recorded as speaking version 3; the key is
	// created, and credentials given, only once every voter is.
	opSpeaks = "speaks"
	// opKey: the resume key, created once by the first leader that gives
	// credentials, with generation 1; a key already recorded is kept.
	opKey = "key"
	// opGeneration: the next generation of credentials. Ignored unless
	// Epoch is current.
	opGeneration = "generation"
	// opRecords: records of ends (an operator's release or kick,
	// SUPERSEDED), made before the claims leave the leader's table.
	// Ignored unless Epoch is current.
	opRecords = "records"
	// opSuccessor: the leader of Epoch, handing over, chose Node as its
	// successor, which then holds resumes until it serves.
	opSuccessor = "successor"
	// The chunks of a planned handover's list are entries of their own,
	// binary (listEntryMagic), not commands.
)

// Epoch space: tokens are Epoch<<counterBits | counter, so the epoch has
// 64-counterBits bits. A new leader refuses to take an epoch once fewer
// than epochReserve are left (tokens would stop rising at the wrap), and
// says so loudly from epochWarnLeft on.
const (
	maxEpoch     = 1<<(64-counterBits) - 1
	epochReserve = 1 << 10
	epochWarnAt  = maxEpoch - 1<<20
)

// command is one log entry, JSON-encoded (a few entries per leadership: a
// readable log is worth more than a few bytes).
type command struct {
	Op      string        `json:"op"`
	Epoch   uint64        `json:"epoch,omitempty"` // opBound, opHandoff: the epoch it belongs to
	Node    string        `json:"node,omitempty"`
	Addr    string        `json:"addr,omitempty"`
	OpsAddr string        `json:"ops_addr,omitempty"`
	Bound   time.Duration `json:"bound,omitempty"`
	// LeaderLease is the new leader's LeaderLeaseTimeout (opEpoch): how
	// long it would keep confirming heartbeats if later cut off.
	LeaderLease time.Duration `json:"leader_lease,omitempty"`
	// ClusterID is proposed by the first leader (opEpoch); later ones keep
	// the recorded one.
	ClusterID string   `json:"cluster_id,omitempty"`
	Members   []string `json:"members,omitempty"` // opJoined, opSpeaks

	Key     []byte             `json:"key,omitempty"`     // opKey
	Records []server.EndRecord `json:"records,omitempty"` // opRecords
	// opHandoff, of a handover that listed claims: how many entries of
	// the list and claims it holds, the SHA-256 of its entries in order,
	// and the longest time left of its claims.
	ListChunks int           `json:"list_chunks,omitempty"`
	ListClaims int           `json:"list_claims,omitempty"`
	ListDigest []byte        `json:"list_digest,omitempty"`
	ListLeft   time.Duration `json:"list_left,omitempty"`
}

// state is the replicated state machine's value, and its snapshot.
type state struct {
	// ClusterID names the cluster; set by its first epoch, never changed.
	ClusterID string `json:"cluster_id,omitempty"`
	// Epoch is raised once per leadership; tokens are Epoch<<40 | counter.
	Epoch uint64 `json:"epoch"`
	// Inherited is the failover grace the current epoch began with, and
	// GraceServed whether its leader has served it whole.
	Inherited   time.Duration `json:"inherited"`
	GraceServed bool          `json:"grace_served,omitempty"`
	// LeaseBound is the longest lease a leader may have granted or queued.
	LeaseBound time.Duration `json:"lease_bound"`
	// Handoff, when HandoffEpoch is the current epoch, replaces the crash
	// grace of the next leader: the current leader stopped on purpose.
	Handoff      time.Duration `json:"handoff"`
	HandoffEpoch uint64        `json:"handoff_epoch,omitempty"`
	// Nodes holds each node's advertised addresses and leader lease
	// timeout, as it recorded them when it last became leader.
	Nodes map[string]nodeAddrs `json:"nodes"`
	// Joined lists the members known to hold the log, sorted.
	Joined []string `json:"joined,omitempty"`

	// Protocol version 3. ResumeKey is the key of every credential (kept
	// in snapshots, which are mode 0600 in directories of mode 0700), and
	// Generation the current generation; V3 the members recorded as
	// speaking version 3, sorted; Records the records of ends not yet
	// dropped; Successor the node the leader of SuccessorEpoch chose when
	// it began to hand over; List the planned list of its epoch, until the
	// next epoch has served its grace (behind a pointer: get does not copy
	// it).
	ResumeKey      []byte             `json:"resume_key,omitempty"`
	Generation     uint32             `json:"generation,omitempty"`
	V3             []string           `json:"v3,omitempty"`
	Records        []server.EndRecord `json:"records,omitempty"`
	Successor      string             `json:"successor,omitempty"`
	SuccessorEpoch uint64             `json:"successor_epoch,omitempty"`
	List           *listState         `json:"list,omitempty"`
}

// listState is a planned handover's list in the replicated state: its
// entries as they came, and, once the handoff that counts them committed
// and matched, Complete with the number of claims and the longest time
// left. Its chunks are never changed once appended.
type listState struct {
	Epoch    uint64        `json:"epoch"`
	Chunks   [][]byte      `json:"chunks"`
	Complete bool          `json:"complete,omitempty"`
	Claims   int           `json:"claims,omitempty"`
	Left     time.Duration `json:"left,omitempty"`
}

type nodeAddrs struct {
	Addr        string        `json:"addr"`
	OpsAddr     string        `json:"ops_addr"`
	LeaderLease time.Duration `json:"leader_lease,omitempty"`
}

// epochResult is what applying opEpoch returns to the new leader.
type epochResult struct {
	Epoch      uint64
	LeaseBound time.Duration
	// Grace is the failover grace of the new epoch (see graceOf).
	Grace time.Duration
	// Planned says the grace comes from the previous leader's handoff.
	Planned bool
	// MaxLeaderLease is the longest leader lease timeout any leader
	// recorded: a crash successor answers no resume before twice it.
	MaxLeaderLease time.Duration
}

// errEpochsExhausted refuses a new epoch near the end of the epoch space.
var errEpochsExhausted = fmt.Errorf("cluster: the epoch space is exhausted (%d of %d epochs used): a new leader could not keep fencing tokens rising, so none takes over; the cluster must be recreated", maxEpoch-epochReserve, maxEpoch)

// errStaleEpoch answers a bound or a handoff of an epoch that is no longer
// the current one: a leader that lost its term meanwhile (and may lead
// again in a later one) must not change what the current epoch relies on.
var errStaleEpoch = errors.New("cluster: command of an epoch that is no longer current")

// fsm implements raft.FSM over state.
type fsm struct {
	mu sync.Mutex
	st state
	// record, if set, is called (outside mu, on Raft's FSM goroutine) when
	// the cluster id or the members that hold the log change, so that the
	// node keeps them on disk: Raft replays the log into the state only
	// once a leader says what is committed, and a restarted node must be
	// able to answer a founder's question before that (bootstrap.go).
	record func(clusterID string, joined []string)
	// creds is what credentials are computed with, as the state has it:
	// published after each change of the key, the generation or the
	// cluster id, for the leader's server to read without f.mu.
	creds atomic.Pointer[credState]
}

// credState is the replicated state's part that credentials need.
type credState struct {
	minter     *wire.Minter // nil without a key
	clusterID  string
	generation uint32
	// lostKey: credentials were given (a generation) but the key is not
	// here: a snapshot of a node that did not keep it.
	lostKey bool
}

// publishCredsLocked publishes what credentials need, if it changed. f.mu
// must be held.
func (f *fsm) publishCredsLocked() {
	old := f.creds.Load()
	if old != nil && old.clusterID == f.st.ClusterID && old.generation == f.st.Generation && (old.minter != nil) == (f.st.ResumeKey != nil) {
		return
	}
	cs := &credState{clusterID: f.st.ClusterID, generation: f.st.Generation, lostKey: f.st.Generation > 0 && f.st.ResumeKey == nil}
	if old != nil && old.minter != nil && f.st.ResumeKey != nil {
		cs.minter = old.minter // the key never changes
	} else if f.st.ResumeKey != nil {
		cs.minter, _ = wire.NewMinter(f.st.ResumeKey)
	}
	f.creds.Store(cs)
}

func newFSM() *fsm { return &fsm{st: state{Nodes: map[string]nodeAddrs{}}} }

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) > 0 && l.Data[0] == listEntryMagic {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.applyListLocked(l.Data)
	}
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return fmt.Errorf("cluster: undecodable log entry %d: %w", l.Index, err)
	}
	f.mu.Lock()
	before, beforeJoined := f.st.ClusterID, len(f.st.Joined)
	res := f.applyLocked(c, l.Index)
	f.publishCredsLocked()
	changed := f.st.ClusterID != before || len(f.st.Joined) != beforeJoined
	id, joined := f.st.ClusterID, slices.Clone(f.st.Joined)
	f.mu.Unlock()
	if changed && f.record != nil {
		f.record(id, joined)
	}
	return res
}

// applyLocked applies c. f.mu must be held.
func (f *fsm) applyLocked(c command, index uint64) any {
	switch c.Op {
	case opEpoch:
		return f.applyEpochLocked(c)
	case opBound:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.LeaseBound = c.Bound
		return nil
	case opHandoff:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		if c.ListChunks > 0 {
			// The list is used only whole: every entry, in order, as the
			// handoff counts and digests them. Otherwise no handoff: the
			// next leader starts as after a crash.
			l := f.st.List
			if l == nil || l.Epoch != c.Epoch || len(l.Chunks) != c.ListChunks || !bytesEqual(listDigest(l.Chunks), c.ListDigest) {
				f.st.List = nil
				return errListIncomplete
			}
			l.Complete, l.Claims, l.Left = true, c.ListClaims, c.ListLeft
		}
		f.st.Handoff, f.st.HandoffEpoch = c.Bound, c.Epoch
		return nil
	case opServed:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.GraceServed = true
		if f.st.List != nil && f.st.List.Epoch < c.Epoch {
			f.st.List = nil
		}
		f.st.Records = slices.DeleteFunc(f.st.Records, func(r server.EndRecord) bool { return r.Epoch < c.Epoch })
		return nil
	case opSpeaks:
		for _, m := range c.Members {
			if !slices.Contains(f.st.V3, m) {
				f.st.V3 = append(f.st.V3, m)
			}
		}
		slices.Sort(f.st.V3)
		// The node's addresses, for a NOT_LEADER naming it before it has
		// led (an epoch records them again, with its leader lease).
		if a, ok := f.st.Nodes[c.Node]; c.Node != "" && c.Addr != "" && (!ok || a.Addr == "") {
			a.Addr, a.OpsAddr = c.Addr, c.OpsAddr
			f.st.Nodes[c.Node] = a
		}
		return nil
	case opKey:
		// Never twice: a second key would refuse every credential of the
		// first.
		if f.st.ResumeKey == nil && f.st.Generation == 0 && len(c.Key) == wire.KeySize {
			f.st.ResumeKey, f.st.Generation = c.Key, 1
		}
		return nil
	case opGeneration:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		if f.st.ResumeKey == nil || f.st.Generation == 1<<32-1 {
			return errNoKey
		}
		f.st.Generation++
		return f.st.Generation
	case opRecords:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.Records = append(slices.Clip(f.st.Records), c.Records...)
		return nil
	case opSuccessor:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.Successor, f.st.SuccessorEpoch = c.Node, c.Epoch
		return nil
	case opJoined:
		for _, m := range c.Members {
			if !slices.Contains(f.st.Joined, m) {
				f.st.Joined = append(f.st.Joined, m)
			}
		}
		slices.Sort(f.st.Joined)
		return nil
	}
	return fmt.Errorf("cluster: unknown command %q in log entry %d", c.Op, index)
}

// applyEpochLocked starts the next epoch. Its grace is graceOf the state
// the previous epoch left; the handoff is used once.
func (f *fsm) applyEpochLocked(c command) any {
	if f.st.Epoch >= maxEpoch-epochReserve {
		return errEpochsExhausted
	}
	var maxLease time.Duration
	for _, n := range f.st.Nodes {
		maxLease = max(maxLease, n.LeaderLease)
	}
	maxLease = max(maxLease, c.LeaderLease)
	grace, planned := graceOf(f.st, maxLease)
	inherited := grace
	if l := f.st.List; l != nil && l.Epoch == f.st.Epoch {
		switch {
		case !l.Complete:
			f.st.List = nil // a list its handoff never counted: ignored
		case planned:
			// The successor waits for each listed claim name by name;
			// a crash of the successor before they are all back must
			// leave the next leader waiting for them too.
			inherited = max(grace, l.Left)
		}
	}
	f.st.Epoch++
	f.st.Inherited, f.st.GraceServed = inherited, false
	f.st.Handoff, f.st.HandoffEpoch = 0, 0
	if f.st.ClusterID == "" {
		f.st.ClusterID = c.ClusterID
	}
	if c.Node != "" {
		f.st.Nodes[c.Node] = nodeAddrs{Addr: c.Addr, OpsAddr: c.OpsAddr, LeaderLease: c.LeaderLease}
	}
	return epochResult{Epoch: f.st.Epoch, LeaseBound: f.st.LeaseBound, Grace: grace, Planned: planned, MaxLeaderLease: maxLease}
}

// A chunk of a planned handover's list is a log entry of its own, in
// binary: listEntryMagic (no JSON command starts with it), the epoch it
// belongs to (u64), its sequence number (u32, from 0), then at most
// maxListChunk bytes of the list (server.EncodeHandover): an entry of at
// most 64 KiB.
const (
	listEntryMagic  = 0xB1
	listEntryHeader = 1 + 8 + 4
	maxListEntry    = 64 << 10
	maxListChunk    = maxListEntry - listEntryHeader
)

// errListIncomplete refuses a handoff whose list is not whole.
var errListIncomplete = errors.New("cluster: the handover's list is not whole")

// errNoKey refuses a generation before the key.
var errNoKey = errors.New("cluster: no resume key")

func listEntry(epoch uint64, seq int, chunk []byte) []byte {
	b := make([]byte, 0, listEntryHeader+len(chunk))
	b = append(b, listEntryMagic)
	b = binary.BigEndian.AppendUint64(b, epoch)
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	return append(b, chunk...)
}

// applyListLocked appends a chunk of the list of the current epoch, in
// sequence; one of another epoch, or out of order, makes the list not
// whole (its handoff then refuses it). f.mu must be held.
func (f *fsm) applyListLocked(b []byte) any {
	if len(b) < listEntryHeader {
		return errListIncomplete
	}
	epoch := binary.BigEndian.Uint64(b[1:9])
	seq := int(binary.BigEndian.Uint32(b[9:13]))
	if epoch != f.st.Epoch {
		return errStaleEpoch
	}
	l := f.st.List
	if seq == 0 || l == nil || l.Epoch != epoch || l.Complete {
		l = &listState{Epoch: epoch}
		f.st.List = l
	}
	if seq != len(l.Chunks) {
		f.st.List = nil
		return errListIncomplete
	}
	l.Chunks = append(l.Chunks, b[listEntryHeader:])
	return nil
}

// listDigest is the SHA-256 of the chunks in order, each with its length.
func listDigest(chunks [][]byte) []byte {
	h := sha256.New()
	var n [4]byte
	for _, c := range chunks {
		binary.BigEndian.PutUint32(n[:], uint32(len(c)))
		h.Write(n[:])
		h.Write(c)
	}
	return h.Sum(nil)
}

func bytesEqual(a, b []byte) bool { return len(a) == len(b) && string(a) == string(b) }

// leaderLeaseFactor ties the leader's own lease to the grace: a leader
// confirms and grants until leaderLeaseSpan(its leader lease timeout)
// after the latest send a quorum acknowledged (openWith), and every crash
// grace budgets exactly leaderLeaseSpan of the longest leader lease
// timeout recorded for the old leader (graceOf). One constant, so that
// the lease can never outlast what the grace covers
// (TestLeaderLeaseWithinGrace).
const leaderLeaseFactor = 2

// leaderLeaseSpan is the leader lease of a node whose leader lease
// timeout is llt.
func leaderLeaseSpan(llt time.Duration) time.Duration { return leaderLeaseFactor * llt }

// graceOf is the failover grace of the epoch after st's. After a planned
// handoff by st's own epoch it is the handoff. Otherwise the previous
// leader may have crashed or been cut off: its clients may believe for
// the lease bound B after their last confirmation, which it made at most
// two leader lease timeouts after the last send a quorum acknowledged (and
// every such send came before this election), so B plus twice the longest
// leader lease any leader recorded covers them. And if st's epoch had not
// served its own grace whole, what it inherited may not have run out
// either: never less than that.
func graceOf(st state, maxLeaderLease time.Duration) (grace time.Duration, planned bool) {
	if st.HandoffEpoch != 0 && st.HandoffEpoch == st.Epoch {
		return st.Handoff, true
	}
	grace = st.LeaseBound + leaderLeaseSpan(maxLeaderLease)
	if !st.GraceServed {
		grace = max(grace, st.Inherited)
	}
	return grace, false
}

// newClusterID is a random cluster id, proposed with a first epoch.
func newClusterID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// get returns a copy of the state.
func (f *fsm) get() state {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Nodes = make(map[string]nodeAddrs, len(f.st.Nodes))
	for k, v := range f.st.Nodes {
		st.Nodes[k] = v
	}
	st.Joined = slices.Clone(f.st.Joined)
	st.V3 = slices.Clone(f.st.V3)
	st.Records = slices.Clone(f.st.Records)
	return st
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	b, err := json.Marshal(f.get())
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st state
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]nodeAddrs{}
	}
	f.mu.Lock()
	f.st = st
	f.publishCredsLocked()
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}
