package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// A planned handover's list (docs/protocol.md, section 14, "A planned
// handover: the list"): the claims of version 3 with a credential that a
// server counted at the moment it stopped confirming, and the holders of
// versions 1 and 2 it did not see close, which its successor (the next
// start on the same data directory, or a cluster's next leader) keeps as
// pending claims until each comes back or its time is up.

// HandoverClaim is one claim of a handover's list.
type HandoverClaim struct {
	Name   string
	Shared bool
	// Limit is a shared claim's limit; 1 for an exclusive one.
	Limit uint16
	// Lease is the claim's lease, a whole number of milliseconds.
	Lease time.Duration
	// Token is a holder's token; 0 for a waiter.
	Token uint64
	// Ticket is a waiter's ticket, or the one a holder waited with; 0 if
	// none.
	Ticket uint64
	// Attempt is the number of the resume the claim is on (0: its ACQUIRE's).
	Attempt uint16
	// Left is the claim's time left when it was listed: lease minus its
	// silence. The successor keeps it pending for Left from its own start.
	Left time.Duration
	// NoResume marks a claim whose resume is refused: a holder of version
	// 1 or 2 that was not seen to close, or one of version 3 ended for a
	// broken connection. It keeps its slot for Left, then expires.
	NoResume bool
	// Released marks a claim an operator released (a holder) while the
	// release was being recorded: its resume is told FORCE_RELEASED.
	Released bool
}

// HandoverList is a handover's list.
type HandoverList struct {
	// Epoch is the term that listed the claims: its claims that the list
	// does not hold ended before it stopped confirming.
	Epoch uint64
	// GraceLeft is what was left of that term's own grace (a crash grace it
	// inherited) when it stopped: the successor admits claims of earlier
	// terms as after a crash until it has run out. WaitLeft is what was
	// left of its initial wait before answering them.
	GraceLeft, WaitLeft time.Duration
	Claims              []HandoverClaim
}

// MaxLease is the longest lease of the list's claims, 0 if none.
func (l *HandoverList) MaxLease() time.Duration {
	var m time.Duration
	for i := range l.Claims {
		m = max(m, l.Claims[i].Lease)
	}
	return m
}

// LongestLeft is the longest time left of the list's claims, 0 if none.
func (l *HandoverList) LongestLeft() time.Duration {
	var m time.Duration
	for i := range l.Claims {
		m = max(m, l.Claims[i].Left)
	}
	return m
}

// The encoding, for a standalone server's file and a cluster's Raft
// entries: compact and binary, the claims grouped by name with the name
// written once per group, and no owner text (a resume brings its own).
// A chunk is self-contained:
//
//	magic "BTNL", version u8 = 1, epoch u64, grace_left_ms u32,
//	wait_left_ms u32, claims u32, then groups until the end:
//	name_len u8, name, n u16, then n claims:
//	  flags u8 (bit 0 shared, 1 no resume, 2 released, 3 token, 4 ticket),
//	  limit u16, lease_ms u32, [token u64], [ticket u64], attempt u16,
//	  left_ms u32
const (
	listMagic   = "BTNL"
	listVersion = 1
	listHeader  = 4 + 1 + 8 + 4 + 4 + 4
	// claimMax is the most bytes one claim takes in a group.
	claimMax = 1 + 2 + 4 + 8 + 8 + 2 + 4
	// groupMax is the most claims a group holds (its count is a u16).
	groupMax = 1<<16 - 1
)

const (
	listShared = 1 << iota
	listNoResume
	listReleased
	listToken
	listTicket
)

// ErrBadList says that a handover's list cannot be read: it is not whole,
// or not one this server wrote.
var ErrBadList = errors.New("handover list is not readable")

// EncodeHandover encodes l in chunks of at most maxChunk bytes each (0: one
// chunk), each self-contained; the claims are grouped by name, in the order
// of their names.
func EncodeHandover(l *HandoverList, maxChunk int) [][]byte {
	claims := append([]HandoverClaim(nil), l.Claims...)
	sort.SliceStable(claims, func(i, j int) bool { return claims[i].Name < claims[j].Name })
	if maxChunk <= 0 {
		maxChunk = int(^uint(0) >> 1)
	}
	// A chunk must hold at least one claim with the longest name.
	maxChunk = max(maxChunk, listHeader+1+255+2+claimMax)
	var chunks [][]byte
	var cur []byte
	var count uint32
	var groupAt, groupN int // the open group's count field, and its claims
	var groupName string
	flush := func() {
		if cur != nil {
			binary.BigEndian.PutUint32(cur[listHeader-4:], count)
			chunks = append(chunks, cur)
		}
		cur, count, groupAt = nil, 0, -1
	}
	start := func() {
		cur = append(make([]byte, 0, min(maxChunk, listHeader+len(claims)*(claimMax+8))), listMagic...)
		cur = append(cur, listVersion)
		cur = binary.BigEndian.AppendUint64(cur, l.Epoch)
		cur = binary.BigEndian.AppendUint32(cur, ms32(l.GraceLeft))
		cur = binary.BigEndian.AppendUint32(cur, ms32(l.WaitLeft))
		cur = binary.BigEndian.AppendUint32(cur, 0)
		groupAt = -1
	}
	start()
	for i := range claims {
		c := &claims[i]
		if groupAt < 0 || c.Name != groupName || groupN == groupMax || len(cur)+claimMax > maxChunk {
			if len(cur)+1+len(c.Name)+2+claimMax > maxChunk {
				flush()
				start()
			}
			cur = append(cur, byte(len(c.Name)))
			cur = append(cur, c.Name...)
			groupAt, groupN, groupName = len(cur), 0, c.Name
			cur = append(cur, 0, 0)
		}
		var flags byte
		if c.Shared {
			flags |= listShared
		}
		if c.NoResume {
			flags |= listNoResume
		}
		if c.Released {
			flags |= listReleased
		}
		if c.Token != 0 {
			flags |= listToken
		}
		if c.Ticket != 0 {
			flags |= listTicket
		}
		cur = append(cur, flags)
		cur = binary.BigEndian.AppendUint16(cur, c.Limit)
		cur = binary.BigEndian.AppendUint32(cur, ms32(c.Lease))
		if c.Token != 0 {
			cur = binary.BigEndian.AppendUint64(cur, c.Token)
		}
		if c.Ticket != 0 {
			cur = binary.BigEndian.AppendUint64(cur, c.Ticket)
		}
		cur = binary.BigEndian.AppendUint16(cur, c.Attempt)
		cur = binary.BigEndian.AppendUint32(cur, ms32(c.Left))
		groupN++
		binary.BigEndian.PutUint16(cur[groupAt:], uint16(groupN))
		count++
	}
	flush()
	return chunks
}

// ms32 is d in whole milliseconds, rounded up (a time left counts longer,
// never shorter), within a u32.
func ms32(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	m := (d + time.Millisecond - 1) / time.Millisecond
	return uint32(min(m, 1<<32-1))
}

// DecodeHandover reads a list from its chunks, in order. Every chunk must
// have the same header and hold as many claims as it says.
func DecodeHandover(chunks [][]byte) (*HandoverList, error) {
	if len(chunks) == 0 {
		return nil, fmt.Errorf("%w: no chunk", ErrBadList)
	}
	l := &HandoverList{}
	for i, b := range chunks {
		if len(b) < listHeader || string(b[:4]) != listMagic || b[4] != listVersion {
			return nil, fmt.Errorf("%w: chunk %d has no list header", ErrBadList, i)
		}
		epoch := binary.BigEndian.Uint64(b[5:13])
		grace := time.Duration(binary.BigEndian.Uint32(b[13:17])) * time.Millisecond
		wait := time.Duration(binary.BigEndian.Uint32(b[17:21])) * time.Millisecond
		if i == 0 {
			l.Epoch, l.GraceLeft, l.WaitLeft = epoch, grace, wait
		} else if epoch != l.Epoch || grace != l.GraceLeft || wait != l.WaitLeft {
			return nil, fmt.Errorf("%w: chunk %d belongs to another list", ErrBadList, i)
		}
		want := binary.BigEndian.Uint32(b[21:25])
		got, err := decodeGroups(b[listHeader:], l)
		if err != nil {
			return nil, fmt.Errorf("%w: chunk %d: %v", ErrBadList, i, err)
		}
		if got != want {
			return nil, fmt.Errorf("%w: chunk %d holds %d claims, says %d", ErrBadList, i, got, want)
		}
	}
	return l, nil
}

func decodeGroups(b []byte, l *HandoverList) (uint32, error) {
	var count uint32
	for len(b) > 0 {
		n := int(b[0])
		if n == 0 || len(b) < 1+n+2 {
			return count, errors.New("a group cut short")
		}
		name := string(b[1 : 1+n])
		claims := int(binary.BigEndian.Uint16(b[1+n:]))
		b = b[1+n+2:]
		for range claims {
			if len(b) < 1+2+4 {
				return count, errors.New("a claim cut short")
			}
			flags := b[0]
			c := HandoverClaim{
				Name:     name,
				Shared:   flags&listShared != 0,
				NoResume: flags&listNoResume != 0,
				Released: flags&listReleased != 0,
				Limit:    binary.BigEndian.Uint16(b[1:3]),
				Lease:    time.Duration(binary.BigEndian.Uint32(b[3:7])) * time.Millisecond,
			}
			b = b[7:]
			need := 2 + 4
			if flags&listToken != 0 {
				need += 8
			}
			if flags&listTicket != 0 {
				need += 8
			}
			if len(b) < need {
				return count, errors.New("a claim cut short")
			}
			if flags&listToken != 0 {
				c.Token, b = binary.BigEndian.Uint64(b), b[8:]
			}
			if flags&listTicket != 0 {
				c.Ticket, b = binary.BigEndian.Uint64(b), b[8:]
			}
			c.Attempt = binary.BigEndian.Uint16(b)
			c.Left = time.Duration(binary.BigEndian.Uint32(b[2:6])) * time.Millisecond
			b = b[6:]
			if c.Lease <= 0 || c.Limit == 0 || (c.Token == 0 && c.Ticket == 0) || (!c.Shared && c.Limit != 1) {
				return count, fmt.Errorf("a claim of %q that no table holds", name)
			}
			l.Claims = append(l.Claims, c)
			count++
		}
	}
	return count, nil
}
