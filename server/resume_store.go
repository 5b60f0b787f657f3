package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/tokenstore"
)

// A standalone server's version 3 state lives in its data directory
// (internal/tokenstore): the key and generation in resume-key, a planned
// stop's list in resume-list, the records of ends in revoked.

// minGenerationPeriod is the shortest life of a generation: R = max(B,
// 30 s), so that a credential read off the wire is worthless about two
// generations after its claim last heard from its server.
const minGenerationPeriod = 30 * time.Second

// StoreResume is the ResumeSource of a standalone server, on its data
// directory. Make it with ConfigureStandalone.
type StoreResume struct {
	st     *tokenstore.Store
	minter *wire.Minter
	// give is false when no credential is given (-crash-grace-max 0: no
	// claim may believe across a restart).
	give bool
	gen  atomic.Uint32

	mu      sync.Mutex
	records []EndRecord
}

// ConfigureStandalone sets in cfg what a standalone server on st needs for
// protocol version 3: its ResumeSource, tickets, the credential cap
// (graceMax: a claim whose lease is above it gets no credential, and with
// 0 none does), the crash grace (NoGrantFor: st.Grace(), capped by
// graceMax), and what it carries in (the claims of a crash grace, a
// planned stop's list). A list that cannot be read makes the start one
// after a crash, with the grace of the lease bound its run kept.
func ConfigureStandalone(cfg *Config, st *tokenstore.Store, graceMax time.Duration) (*StoreResume, error) {
	key, gen := st.ResumeKey()
	m, err := wire.NewMinter(key)
	if err != nil {
		return nil, err
	}
	r := &StoreResume{st: st, minter: m, give: graceMax > 0}
	r.gen.Store(gen)
	if r.records, err = decodeRecords(st.Records()); err != nil {
		return nil, fmt.Errorf("data-dir: revoked: %w", err)
	}
	cfg.Resume = r
	cfg.NextTicket = st.NextTicket
	cfg.ResumeMaxLease = graceMax
	epoch := st.Epoch()
	grace := st.Grace()
	carried := Carried{Epoch: epoch}
	if b := st.ResumeList(); b != nil {
		list, err := DecodeHandover([][]byte{b})
		switch {
		case err != nil:
			// Not whole: the claims it held may still be believed, and
			// nothing says which; wait as after a crash.
			grace = max(grace, st.LeaseBound())
			if cfg.Logger != nil {
				cfg.Logger.Error("the resume list of the last stop cannot be read; waiting as after a crash", "err", err, "grace", min(grace, graceMax).String())
			}
		default:
			carried.List = list
			// Each listed lease stays in the bound until the list is
			// consumed: a crash of this run must wait for them too.
			if err := st.NoteLease(list.MaxLease()); err != nil {
				return nil, err
			}
		}
	}
	grace = min(grace, graceMax)
	if grace > 0 {
		carried.ResumeBelow = epoch << epochShift
	}
	cfg.NoGrantFor = grace
	cfg.Carried = carried
	return r, nil
}

// Credentials is ResumeSource.Credentials: the data directory's key, no
// cluster id, and the current generation.
func (r *StoreResume) Credentials() (*wire.Minter, string, uint32, bool) {
	return r.minter, "", r.gen.Load(), r.give
}

// NewGeneration is ResumeSource.NewGeneration: written to resume-key,
// fsynced, before it is used.
func (r *StoreResume) NewGeneration() (uint32, error) {
	gen, err := r.st.NewGeneration()
	if err != nil {
		return 0, err
	}
	r.gen.Store(gen)
	return gen, nil
}

// GenerationPeriod is ResumeSource.GenerationPeriod: max(B, 30 s), B the
// lease bound the data directory records.
func (r *StoreResume) GenerationPeriod() time.Duration {
	return max(r.st.LeaseBound(), minGenerationPeriod)
}

// Record is ResumeSource.Record: the records are written to revoked,
// fsynced.
func (r *StoreResume) Record(recs []EndRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := append(slices.Clone(r.records), recs...)
	if err := r.st.WriteRecords(encodeRecords(all)); err != nil {
		return err
	}
	r.records = all
	return nil
}

// Ended is ResumeSource.Ended.
func (r *StoreResume) Ended(name string, held bool, id uint64) (RecordKind, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.records {
		if r.records[i].Matches(name, held, id) {
			return r.records[i].Kind, r.records[i].Epoch, true
		}
	}
	return 0, 0, false
}

// TermServed is ResumeSource.TermServed: the list is consumed, and the
// records of earlier runs are dropped (no claim of theirs can come back).
func (r *StoreResume) TermServed(epoch uint64) {
	if err := r.st.DropResumeList(); err != nil {
		// The next start then waits for the claims again: only slower.
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := slices.DeleteFunc(slices.Clone(r.records), func(rec EndRecord) bool { return rec.Epoch < epoch })
	if len(kept) == len(r.records) {
		return
	}
	if err := r.st.WriteRecords(encodeRecords(kept)); err == nil {
		r.records = kept
	}
}

// The records' encoding: one after the other, each kind u8, held u8, id
// u64, below u64, epoch u64, name_len u8, name.
const recordFixed = 1 + 1 + 8 + 8 + 8 + 1

func encodeRecords(recs []EndRecord) []byte {
	var b []byte
	for _, r := range recs {
		held := byte(0)
		if r.Held {
			held = 1
		}
		b = append(b, byte(r.Kind), held)
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = binary.BigEndian.AppendUint64(b, r.Below)
		b = binary.BigEndian.AppendUint64(b, r.Epoch)
		b = append(b, byte(len(r.Name)))
		b = append(b, r.Name...)
	}
	return b
}

func decodeRecords(b []byte) ([]EndRecord, error) {
	var recs []EndRecord
	for len(b) > 0 {
		if len(b) < recordFixed || len(b) < recordFixed+int(b[recordFixed-1]) {
			return nil, errors.New("a record cut short")
		}
		r := EndRecord{
			Kind:  RecordKind(b[0]),
			Held:  b[1] == 1,
			ID:    binary.BigEndian.Uint64(b[2:10]),
			Below: binary.BigEndian.Uint64(b[10:18]),
			Epoch: binary.BigEndian.Uint64(b[18:26]),
		}
		n := int(b[recordFixed-1])
		r.Name = string(b[recordFixed : recordFixed+n])
		if r.Kind < RecordReleased || r.Kind > RecordNameReleased || r.Name == "" {
			return nil, fmt.Errorf("a record of kind %d for %q", r.Kind, r.Name)
		}
		recs = append(recs, r)
		b = b[recordFixed+n:]
	}
	return recs, nil
}
