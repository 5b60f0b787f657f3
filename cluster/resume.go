package cluster

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/server"
)

// Protocol version 3 in a cluster (docs/protocol.md, section 14): what the
// replicated state keeps so that a claim's credential is checked on any
// later leader (the key, the generations), so that an end an operator
// decided is never undone by a failover (the records), and so that a
// planned handover hands the successor the exact table (the list); and
// what the leader loop does with them.

// speaksVersion is the newest protocol version this node speaks: the
// hello tells it, and the leader records it (opSpeaks).
const speaksVersion = wire.Version3

// minGenerationPeriod: a generation lasts max(B, 30 s) of a leader's
// serving.
const minGenerationPeriod = 30 * time.Second

// resumeSource is the server's ResumeSource on a cluster's node: the
// replicated state.
type resumeSource struct{ n *Node }

var _ server.ResumeSource = resumeSource{}

// Credentials is server.ResumeSource.Credentials: the replicated key and
// generation, while this leader gives credentials (every voter speaks
// version 3, the key is recorded).
func (r resumeSource) Credentials() (*wire.Minter, string, uint32, bool) {
	cs := r.n.fsm.creds.Load()
	if cs == nil || cs.minter == nil || !r.n.giving.Load() {
		return nil, "", 0, false
	}
	return cs.minter, cs.clusterID, cs.generation, true
}

// NewGeneration is server.ResumeSource.NewGeneration: one Raft write.
func (r resumeSource) NewGeneration() (uint32, error) {
	res, err := r.n.applyResult(command{Op: opGeneration, Epoch: r.n.epoch.Load()})
	if err != nil {
		return 0, err
	}
	gen, _ := res.(uint32)
	return gen, nil
}

// GenerationPeriod is server.ResumeSource.GenerationPeriod: max(B, 30 s),
// B the cluster's lease bound.
func (r resumeSource) GenerationPeriod() time.Duration { return max(r.n.bound(), minGenerationPeriod) }

// Record is server.ResumeSource.Record: one Raft write for the batch.
func (r resumeSource) Record(recs []server.EndRecord) error {
	if recordSkipped() {
		r.n.log.Warn("record of ends skipped (faultinject build): a later leader may take an ended claim back", "claims", len(recs))
		return nil
	}
	return r.n.apply(command{Op: opRecords, Epoch: r.n.epoch.Load(), Records: recs})
}

// Ended is server.ResumeSource.Ended, from the replicated records.
func (r resumeSource) Ended(name string, held bool, id uint64) (server.RecordKind, uint64, bool) {
	f := r.n.fsm
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.st.Records {
		if f.st.Records[i].Matches(name, held, id) {
			return f.st.Records[i].Kind, f.st.Records[i].Epoch, true
		}
	}
	return 0, 0, false
}

// TermServed is server.ResumeSource.TermServed: the leader loop records
// it (opServed, which drops the records and the list of earlier epochs).
func (r resumeSource) TermServed(uint64) {
	select {
	case r.n.servedNow <- struct{}{}:
	default:
	}
}

// nextTicket is server.Config.NextTicket: epoch<<40 | counter, as tokens.
func (t *tokens) nextTicket() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tickets++
	if t.tickets >= 1<<counterBits {
		panic("cluster: 2^40 waiters in one leadership; tickets would stop rising")
	}
	return t.epoch<<counterBits | t.tickets
}

// AboutToServe is server.Replica.AboutToServe: this node won an election
// and commits its epoch, or the leader handing over chose it; a resume it
// reads meanwhile is held until it serves.
func (n *Node) AboutToServe() bool {
	r := n.r()
	if r == nil || n.leading.Load() {
		return false
	}
	if r.State() == raft.Leader {
		return true
	}
	f := n.fsm
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Successor == n.cfg.NodeID && f.st.SuccessorEpoch == f.st.Epoch
}

// versionOf asks member sv which protocol version it speaks, and its
// advertised addresses: over the Raft port's hello (a node of an older
// version answers no version). Over the in-memory transport of the tests
// it is askVersion.
func (n *Node) versionOf(sv raft.Server) (speaks uint8, addrs nodeAddrs, err error) {
	if n.askVersion != nil {
		return n.askVersion(sv)
	}
	lt, ok := n.transport.(*leaseTransport)
	if !ok {
		return 0, nodeAddrs{}, errors.New("no hello over this transport")
	}
	rt, ok := lt.Transport.(*raftTransport)
	if !ok {
		return speaksVersion, nodeAddrs{}, nil
	}
	reply, err := askHello(rt.stream.Dial, string(sv.Address), n.cfg.NodeID)
	if err != nil {
		return 0, nodeAddrs{}, err
	}
	return reply.Speaks, nodeAddrs{Addr: reply.Addr, OpsAddr: reply.OpsAddr}, nil
}

// watchVersions looks at the members' versions while this node leads
// (lookAtVersions): at once when asked on versionsNow (a new term), then
// every joinedEvery; while credentials are not given, sooner (from
// versionsRetryMin, doubling), so that a new cluster's claims are
// resumable within moments of its first leader. Until stop is closed; it
// closes done.
func (n *Node) watchVersions(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(joinedEvery)
	defer t.Stop()
	retry := versionsRetryMin
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-n.versionsNow:
			retry = versionsRetryMin
		}
		next := joinedEvery
		if n.leading.Load() {
			n.lookAtVersions()
			if !n.giving.Load() {
				next, retry = retry, min(2*retry, joinedEvery)
			}
		}
		t.Reset(next)
	}
}

// versionsRetryMin is the first wait before a leader that gives no
// credentials asks its voters' versions again.
const versionsRetryMin = 50 * time.Millisecond

// lookAtVersions, on watchVersions' goroutine of a serving leader, records the
// voters that speak version 3, creates the key once every voter does and
// none is recorded, and decides whether this leader gives credentials:
// only while every voter speaks version 3 (an older node could lead next,
// and could neither check a credential nor keep the key in its
// snapshots) and the key is here.
func (n *Node) lookAtVersions() {
	st := n.fsm.get()
	all := true
	for _, sv := range n.r().GetConfiguration().Configuration().Servers {
		id := string(sv.ID)
		if sv.Suffrage != raft.Voter || slices.Contains(st.V3, id) {
			continue
		}
		speaks, addrs := uint8(speaksVersion), nodeAddrs{Addr: n.cfg.Addr, OpsAddr: n.cfg.OpsAddr}
		if id != n.cfg.NodeID || n.askVersion != nil {
			var err error
			if speaks, addrs, err = n.versionOf(sv); err != nil {
				speaks = 0
			}
		}
		if speaks < speaksVersion {
			all = false
			continue
		}
		if err := n.apply(command{Op: opSpeaks, Members: []string{id}, Node: id, Addr: addrs.Addr, OpsAddr: addrs.OpsAddr}); err != nil {
			all = false
		}
	}
	st = n.fsm.get()
	switch {
	case !all:
	case st.ResumeKey == nil && st.Generation > 0:
		// Credentials were given with a key this state does not hold (a
		// snapshot of a node that did not keep it): a new key would refuse
		// every one of them. Give none, and say so.
		if !n.lostKeySaid.Swap(true) {
			n.log.Error("the replicated state records credentials (generation) but no resume key: no credential is given or checked; claims of version 3 behave as version 2",
				"generation", st.Generation)
		}
		all = false
	case st.ResumeKey == nil:
		key := make([]byte, wire.KeySize)
		if _, err := rand.Read(key); err != nil {
			n.log.Error("cannot make a resume key", "err", err)
			all = false
			break
		}
		if err := n.apply(command{Op: opKey, Key: key}); err != nil {
			n.log.Warn("cannot record the resume key", "err", err)
			all = false
			break
		}
		n.log.Info("resume key created: every voter speaks protocol version 3")
	}
	n.giving.Store(all && n.fsm.get().ResumeKey != nil)
}

// mayGive reports whether the replicated state lets this leader give
// credentials: every voter recorded as speaking version 3, and the key.
func (n *Node) mayGive() bool {
	st := n.fsm.get()
	if st.ResumeKey == nil {
		return false
	}
	for _, sv := range n.r().GetConfiguration().Configuration().Servers {
		if sv.Suffrage == raft.Voter && !slices.Contains(st.V3, string(sv.ID)) {
			return false
		}
	}
	return true
}

// carried is what the leader of the committed epoch res takes over from
// the replicated state: after a crash, the claims of earlier terms its
// grace takes back, answered only after its initial wait; after a planned
// handover whose list committed whole, that list (and, when the handover
// ended inside its leader's own grace, what was left of that leader's
// crash grace and initial wait).
func (n *Node) carried(res epochResult) server.Carried {
	c := server.Carried{Epoch: res.Epoch}
	if !res.Planned {
		c.ResumeBelow = res.Epoch << counterBits
		c.HoldResumes = 2 * res.MaxLeaderLease
		if initialWaitRemoved() {
			n.log.Warn("initial wait removed (faultinject build): resumes answered while the old leader may still serve")
			c.HoldResumes = 0
		}
	}
	st := n.fsm.get()
	l := st.List
	if l == nil || !l.Complete {
		return c
	}
	if listIgnored() {
		n.log.Warn("planned list ignored (faultinject build): names grant while listed holders may still believe")
		return c
	}
	list, err := server.DecodeHandover(l.Chunks)
	if err != nil {
		n.log.Error("the planned handover's list cannot be read; its claims are not waited for name by name", "list_epoch", l.Epoch, "err", err)
		return c
	}
	c.List = list
	if res.Planned && list.GraceLeft > 0 {
		c.ResumeBelow = list.Epoch << counterBits
		c.HoldResumes = list.WaitLeft
	}
	return c
}

// recordList commits the list of this epoch's planned handover, in entries
// of at most 64 KiB, and returns what the handoff must carry of it.
func (n *Node) recordList(epoch uint64, list *server.HandoverList) (command, error) {
	var cmd command
	if list == nil || len(list.Claims) == 0 {
		return cmd, nil
	}
	chunks := server.EncodeHandover(list, maxListChunk)
	r := n.r()
	start := time.Now()
	// Every entry goes out at once (Raft pipelines and batches them); each
	// is then waited for, in order.
	futures := make([]raft.ApplyFuture, len(chunks))
	for seq, chunk := range chunks {
		futures[seq] = r.Apply(listEntry(epoch, seq, chunk), applyTimeout)
	}
	for seq, f := range futures {
		if err := f.Error(); err != nil {
			return cmd, fmt.Errorf("commit entry %d of %d of the list: %w", seq+1, len(chunks), err)
		}
		if err, ok := f.Response().(error); ok {
			return cmd, fmt.Errorf("entry %d of %d of the list: %w", seq+1, len(chunks), err)
		}
	}
	n.log.Info("planned handover's list committed", "claims", len(list.Claims), "entries", len(chunks),
		"took", time.Since(start).Round(time.Millisecond).String())
	cmd.ListChunks, cmd.ListClaims = len(chunks), len(list.Claims)
	cmd.ListDigest, cmd.ListLeft = listDigest(chunks), list.LongestLeft()
	return cmd, nil
}

// chooseSuccessor is the voter a handover transfers to: of the healthy
// ones heard from lately, the one least behind, as the leader's health
// watch sees them; "" if none (Raft then picks).
func (n *Node) chooseSuccessor() (id, addr string) {
	var best *MemberHealth
	hs := n.Health()
	voters := map[raft.ServerID]bool{}
	for _, sv := range n.r().GetConfiguration().Configuration().Servers {
		if sv.Suffrage == raft.Voter && string(sv.ID) != n.cfg.NodeID {
			voters[sv.ID] = true
		}
	}
	// Heard from within half a heartbeat timeout (a live member answers
	// the leader's heartbeats, sent ten times as often): a member that
	// went away a moment ago may still look healthy.
	fresh := n.cfg.HeartbeatTimeout / 2
	for i := range hs {
		h := &hs[i]
		if !voters[h.ID] || !h.Reachable || !h.Healthy || h.LastContact < 0 || h.LastContact > fresh {
			continue
		}
		if best == nil || h.IndexLag < best.IndexLag {
			best = h
		}
	}
	if best == nil {
		return "", ""
	}
	return string(best.ID), n.fsm.get().Nodes[string(best.ID)].Addr
}
