package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

// cred is a credential whose bytes are easy to spot in printed text.
var cred = wire.Credential{0xca, 0xfe, 0xba, 0xbe, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}

// resumePayload builds a version 3 ACQUIRE payload with a resume block by
// hand, from the spec's table.
func resumePayload(flags byte, lease uint32, limit uint16, id uint64, gen uint32, attempt uint16, c wire.Credential, name, owner string) []byte {
	p := []byte{3, flags | wire.FlagResume}
	p = binary.BigEndian.AppendUint32(p, lease)
	p = binary.BigEndian.AppendUint16(p, limit)
	p = binary.BigEndian.AppendUint64(p, id)
	p = binary.BigEndian.AppendUint32(p, gen)
	p = binary.BigEndian.AppendUint16(p, attempt)
	p = append(p, c[:]...)
	p = append(p, byte(len(name)))
	p = append(p, name...)
	return append(p, owner...)
}

func TestDecodeAcquireV3Errors(t *testing.T) {
	good := func() []byte { return resumePayload(wire.FlagHeld, 10000, 1, 7, 1, 1, cred, "jobs", "h:1") }
	tests := []struct {
		what string
		p    []byte
		want wire.Code
	}{
		{"version only", []byte{3}, wire.CodeProtocol},
		{"8 bytes", []byte{3, 0, 0, 0, 3, 0xe8, 0, 1}, wire.CodeProtocol},
		{"the version 1 layout", acquirePayload(3, 0, 1000, "jobs", ""), wire.CodeProtocol},
		{"name_len 4, 2 name bytes", acquirePayloadV2(3, 0, 1000, 1, "jobs", "")[:11], wire.CodeProtocol},
		{"RESUME, no resume block", acquirePayloadV2(3, wire.FlagResume, 1000, 1, "jobs", ""), wire.CodeProtocol},
		// The length rule of RESUME comes before the flag rules.
		{"RESUME and bit 4, no resume block", acquirePayloadV2(3, wire.FlagResume|0x10, 1000, 1, "jobs", ""), wire.CodeProtocol},
		{"RESUME, 38 bytes", good()[:38], wire.CodeProtocol},
		{"RESUME, name cut short", good()[:41], wire.CodeProtocol},
		{"HELD without RESUME", acquirePayloadV2(3, wire.FlagHeld, 1000, 1, "jobs", ""), wire.CodeBadRequest},
		{"bit 4", acquirePayloadV2(3, 0x10, 1000, 1, "jobs", ""), wire.CodeBadRequest},
		{"bit 7 with a resume", resumePayload(wire.FlagHeld|0x80, 10000, 1, 7, 1, 1, cred, "jobs", ""), wire.CodeBadRequest},
		{"NOWAIT with RESUME", resumePayload(wire.FlagHeld|wire.FlagNoWait, 10000, 1, 7, 1, 1, cred, "jobs", ""), wire.CodeBadRequest},
		{"resume id 0", resumePayload(wire.FlagHeld, 10000, 1, 0, 1, 1, cred, "jobs", ""), wire.CodeBadRequest},
		{"generation 0", resumePayload(wire.FlagHeld, 10000, 1, 7, 0, 1, cred, "jobs", ""), wire.CodeBadRequest},
		{"attempt 0", resumePayload(wire.FlagHeld, 10000, 1, 7, 1, 0, cred, "jobs", ""), wire.CodeBadRequest},
		{"lease 0", acquirePayloadV2(3, 0, 0, 1, "jobs", ""), wire.CodeBadRequest},
		{"limit 0", acquirePayloadV2(3, wire.FlagShared, 1000, 0, "jobs", ""), wire.CodeBadRequest},
		{"limit 2 without SHARED", resumePayload(0, 10000, 2, 7, 1, 1, cred, "jobs", ""), wire.CodeBadRequest},
		{"resume, empty name", resumePayload(wire.FlagHeld, 10000, 1, 7, 1, 1, cred, "", ""), wire.CodeBadRequest},
		{"resume, owner with newline", resumePayload(wire.FlagHeld, 10000, 1, 7, 1, 1, cred, "jobs", "h\n"), wire.CodeBadRequest},
		{"resume, owner of 256 bytes", resumePayload(wire.FlagHeld, 10000, 1, 7, 1, 1, cred, "jobs", strings.Repeat("o", 256)), wire.CodeBadRequest},
		{"version 4", []byte{4}, wire.CodeVersion},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			a, err := wire.DecodeAcquireUpTo(tt.p, wire.Version3)
			wantCode(t, err, tt.want)
			if a != (wire.Acquire{}) {
				t.Errorf("got %+v with the error, want the zero Acquire", a)
			}
		})
	}
}

// TestDecodeAcquireVersions: DecodeAcquire is what a server of versions 1
// and 2 accepts, byte for byte as before; DecodeAcquireUpTo(p, Version3)
// takes version 3 too.
func TestDecodeAcquireVersions(t *testing.T) {
	v3 := acquirePayloadV2(3, 0, 2000, 1, "jobs", "")
	_, err := wire.DecodeAcquire(v3)
	wantCode(t, err, wire.CodeVersion)
	if want := "baton: VERSION: protocol version 3 is not supported, want 1 or 2"; err == nil || err.Error() != want {
		t.Errorf("DecodeAcquire of version 3: got %v, want %q", err, want)
	}
	_, err = wire.DecodeAcquireUpTo(v3, wire.Version2)
	wantCode(t, err, wire.CodeVersion)
	a, err := wire.DecodeAcquireUpTo(v3, wire.Version3)
	if err != nil || a.Version != 3 || a.Limit != 1 || a.Name != "jobs" || a.Resuming() || a.Held() || a.Shared() {
		t.Errorf("DecodeAcquireUpTo(v3, 3): got %+v, %v", a, err)
	}
	_, err = wire.DecodeAcquireUpTo([]byte{4, 0, 0, 0, 0, 1, 0, 1, 1, 'x'}, wire.Version3)
	wantCode(t, err, wire.CodeVersion)
	if want := "baton: VERSION: protocol version 4 is not supported, want 1 to 3"; err == nil || err.Error() != want {
		t.Errorf("DecodeAcquireUpTo of version 4: got %v, want %q", err, want)
	}
	// Versions 1 and 2 decode the same through both.
	for _, p := range [][]byte{acquirePayload(1, 1, 1000, "a", "h:1"), acquirePayloadV2(2, 2, 1000, 3, "a", "")} {
		a1, err1 := wire.DecodeAcquire(p)
		a3, err3 := wire.DecodeAcquireUpTo(p, wire.Version3)
		if err1 != nil || err3 != nil || a1 != a3 {
			t.Errorf("% x: DecodeAcquire %+v %v, DecodeAcquireUpTo %+v %v", p, a1, err1, a3, err3)
		}
	}
}

func TestAcquireV3RoundTrip(t *testing.T) {
	r := wire.Resume{ID: 0x0000030000000007, Generation: 1, Attempt: 1, Credential: cred}
	tests := []struct {
		what string
		a    wire.Acquire
	}{
		{"new exclusive", wire.Acquire{Version: 3, LeaseMs: 10000, Limit: 1, Name: "jobs", Owner: "h:1"}},
		{"new shared NOWAIT", wire.Acquire{Version: 3, Flags: wire.FlagShared | wire.FlagNoWait, LeaseMs: 1, Limit: 65535, Name: "x"}},
		{"resume a holder", wire.Acquire{Version: 3, Flags: wire.FlagResume | wire.FlagHeld, LeaseMs: 10000, Limit: 1, Resume: r, Name: "jobs", Owner: "h:1"}},
		{"resume a shared waiter", wire.Acquire{Version: 3, Flags: wire.FlagResume | wire.FlagShared, LeaseMs: 10000, Limit: 3, Resume: r, Name: "jobs"}},
		{"resume, the largest", wire.Acquire{Version: 3, Flags: wire.FlagResume | wire.FlagHeld | wire.FlagShared, LeaseMs: 0xffffffff, Limit: 65535,
			Resume: wire.Resume{ID: ^uint64(0), Generation: ^uint32(0), Attempt: 65535, Credential: cred},
			Name:   strings.Repeat("n", 255), Owner: strings.Repeat("o", 255)}},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			frame, err := wire.AppendAcquire(nil, tt.a)
			if err != nil {
				t.Fatalf("AppendAcquire: %v", err)
			}
			h, p, n, err := wire.Split(frame)
			if err != nil || n != len(frame) || h.Type != wire.TypeAcquire {
				t.Fatalf("Split: %+v n=%d err=%v", h, n, err)
			}
			want := acquirePayloadV2(3, tt.a.Flags, tt.a.LeaseMs, tt.a.Limit, tt.a.Name, tt.a.Owner)
			if tt.a.Resuming() {
				want = resumePayload(tt.a.Flags, tt.a.LeaseMs, tt.a.Limit, tt.a.Resume.ID, tt.a.Resume.Generation, tt.a.Resume.Attempt, tt.a.Resume.Credential, tt.a.Name, tt.a.Owner)
			}
			if !bytes.Equal(p, want) {
				t.Fatalf("payload: got % x, want % x", p, want)
			}
			if len(p) > wire.MaxAcquire {
				t.Fatalf("payload of %d bytes, above MaxAcquire %d", len(p), wire.MaxAcquire)
			}
			got, err := wire.DecodeAcquireUpTo(p, wire.Version3)
			if err != nil || got != tt.a {
				t.Fatalf("DecodeAcquireUpTo: got %+v (credential % x), %v, want %+v (credential % x)",
					got, got.Resume.Credential[:], err, tt.a, tt.a.Resume.Credential[:])
			}
			if got.Held() != (tt.a.Flags&wire.FlagHeld != 0) || got.Shared() != (tt.a.Flags&wire.FlagShared != 0) {
				t.Fatalf("Held %v Shared %v, flags 0x%02x", got.Held(), got.Shared(), tt.a.Flags)
			}
		})
	}
	if wire.MaxAcquire != 549 {
		t.Errorf("MaxAcquire: got %d, want 39 + 255 + 255 = 549", wire.MaxAcquire)
	}
}

func TestAppendAcquireV3Checks(t *testing.T) {
	good := wire.Acquire{Version: 3, Flags: wire.FlagResume | wire.FlagHeld, LeaseMs: 1, Limit: 1, Name: "jobs",
		Resume: wire.Resume{ID: 1, Generation: 1, Attempt: 1}}
	if _, err := wire.AppendAcquire(nil, good); err != nil {
		t.Fatalf("the good resume: %v", err)
	}
	tests := []struct {
		what string
		edit func(*wire.Acquire)
	}{
		{"HELD without RESUME", func(a *wire.Acquire) { a.Flags, a.Resume = wire.FlagHeld, wire.Resume{} }},
		{"NOWAIT with RESUME", func(a *wire.Acquire) { a.Flags |= wire.FlagNoWait }},
		{"resume fields without RESUME", func(a *wire.Acquire) { a.Flags = 0 }},
		{"id 0", func(a *wire.Acquire) { a.Resume.ID = 0 }},
		{"generation 0", func(a *wire.Acquire) { a.Resume.Generation = 0 }},
		{"attempt 0", func(a *wire.Acquire) { a.Resume.Attempt = 0 }},
		{"bit 4", func(a *wire.Acquire) { a.Flags |= 0x10 }},
		{"limit 0", func(a *wire.Acquire) { a.Limit = 0 }},
		{"exclusive limit 2", func(a *wire.Acquire) { a.Limit = 2 }},
		{"lease 0", func(a *wire.Acquire) { a.LeaseMs = 0 }},
		{"name of 256 bytes", func(a *wire.Acquire) { a.Name = strings.Repeat("n", 256) }},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			a := good
			tt.edit(&a)
			got, err := wire.AppendAcquire([]byte("keep"), a)
			wantCode(t, err, wire.CodeBadRequest)
			if string(got) != "keep" {
				t.Errorf("got dst %q, want it unchanged", got)
			}
		})
	}
}

func TestAcquiredV3(t *testing.T) {
	for _, a := range []wire.Acquired{
		{Token: 7},
		{Push: true, Token: 7},
		{Token: 7, WithCredential: true, Generation: 1, Credential: cred},
		{Push: true, Token: ^uint64(0), WithCredential: true, Generation: ^uint32(0), Credential: cred},
	} {
		frame := wire.AppendAcquiredV3(nil, a)
		h, p, _, err := wire.Split(frame)
		if err != nil || h.Type != wire.TypeAcquired {
			t.Fatalf("%+v: Split: %v", a, err)
		}
		if want := map[bool]int{false: 9, true: 29}[a.WithCredential]; len(p) != want {
			t.Errorf("%+v: payload of %d bytes, want %d", a, len(p), want)
		}
		got, err := wire.DecodeAcquiredV3(p)
		if err != nil || got != a {
			t.Errorf("DecodeAcquiredV3: got %+v, %v, want %+v", got, err, a)
		}
		// The version 1 decoder takes the 9-byte form only, as before.
		push, tok, err := wire.DecodeAcquired(p)
		if a.WithCredential {
			wantCode(t, err, wire.CodeProtocol)
		} else if err != nil || push != a.Push || tok != a.Token {
			t.Errorf("DecodeAcquired of %+v: %v %d %v", a, push, tok, err)
		}
	}
	withCred := wire.AppendAcquiredV3(nil, wire.Acquired{Token: 7, WithCredential: true, Generation: 1, Credential: cred})[3:]
	bad := []struct {
		what string
		p    []byte
	}{
		{"empty", nil},
		{"10 bytes", make([]byte, 10)},
		{"28 bytes", withCred[:28]},
		{"30 bytes", append(bytes.Clone(withCred), 0)},
		{"29 bytes without CREDENTIAL", append([]byte{0}, withCred[1:]...)},
		{"9 bytes with CREDENTIAL", []byte{wire.FlagCredential, 0, 0, 0, 0, 0, 0, 0, 7}},
		{"token 0", append([]byte{wire.FlagCredential, 0, 0, 0, 0, 0, 0, 0, 0}, withCred[9:]...)},
		{"generation 0", append(append(bytes.Clone(withCred[:9]), 0, 0, 0, 0), withCred[13:]...)},
	}
	for _, b := range bad {
		_, err := wire.DecodeAcquiredV3(b.p)
		if err == nil {
			t.Errorf("%s: DecodeAcquiredV3 took it", b.what)
			continue
		}
		wantCode(t, err, wire.CodeProtocol)
	}
}

func TestWaitingV3(t *testing.T) {
	for _, w := range []wire.Waiting{
		{Position: 3},
		{Position: 2, WithTicket: true, Ticket: 9, Generation: 1, Credential: cred},
		{Position: ^uint32(0), WithTicket: true, Ticket: ^uint64(0), Generation: ^uint32(0), Credential: cred},
	} {
		frame := wire.AppendWaitingV3(nil, w)
		h, p, _, err := wire.Split(frame)
		if err != nil || h.Type != wire.TypeWaiting {
			t.Fatalf("%+v: Split: %v", w, err)
		}
		if want := map[bool]int{false: 5, true: 33}[w.WithTicket]; len(p) != want {
			t.Errorf("%+v: payload of %d bytes, want %d", w, len(p), want)
		}
		got, err := wire.DecodeWaitingV3(p)
		if err != nil || got != w {
			t.Errorf("DecodeWaitingV3: got %+v, %v, want %+v", got, err, w)
		}
		pos, err := wire.DecodeWaiting(p)
		if w.WithTicket {
			wantCode(t, err, wire.CodeProtocol)
		} else if err != nil || pos != w.Position {
			t.Errorf("DecodeWaiting of %+v: %d %v", w, pos, err)
		}
	}
	withTicket := wire.AppendWaitingV3(nil, wire.Waiting{Position: 1, WithTicket: true, Ticket: 9, Generation: 1, Credential: cred})[3:]
	bad := []struct {
		what string
		p    []byte
	}{
		{"empty", nil},
		{"6 bytes", make([]byte, 6)},
		{"32 bytes", withTicket[:32]},
		{"33 bytes without TICKET", append([]byte{0}, withTicket[1:]...)},
		{"5 bytes with TICKET", []byte{wire.FlagTicket, 0, 0, 0, 1}},
		{"ticket 0", append(append(bytes.Clone(withTicket[:5]), 0, 0, 0, 0, 0, 0, 0, 0), withTicket[13:]...)},
		{"generation 0", append(append(bytes.Clone(withTicket[:13]), 0, 0, 0, 0), withTicket[17:]...)},
	}
	for _, b := range bad {
		_, err := wire.DecodeWaitingV3(b.p)
		if err == nil {
			t.Errorf("%s: DecodeWaitingV3 took it", b.what)
			continue
		}
		wantCode(t, err, wire.CodeProtocol)
	}
}

// TestCredentialRedacted: no way of printing a credential, or a frame's
// struct that holds one, shows its bytes.
func TestCredentialRedacted(t *testing.T) {
	acq := wire.Acquire{Version: 3, Flags: wire.FlagResume | wire.FlagHeld, LeaseMs: 1, Limit: 1, Name: "jobs",
		Resume: wire.Resume{ID: 1, Generation: 1, Attempt: 1, Credential: cred}}
	var out []string
	for _, v := range []any{cred, &cred, acq.Resume, acq, wire.Acquired{Token: 1, WithCredential: true, Generation: 1, Credential: cred},
		wire.Waiting{WithTicket: true, Ticket: 1, Generation: 1, Credential: cred}} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "% x"} {
			out = append(out, fmt.Sprintf(verb, v))
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%T): %v", v, err)
		}
		out = append(out, string(j))
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "v", v)
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "v", v)
		out = append(out, buf.String())
	}
	for _, o := range out {
		low := strings.ToLower(o)
		if strings.Contains(low, "cafebabe") || strings.Contains(low, "ca fe ba be") || strings.Contains(o, "202 254") ||
			strings.Contains(o, "202,254") || strings.Contains(low, "0xca") || strings.Contains(o, "\xca\xfe") {
			t.Errorf("the credential's bytes are in %q", o)
		}
	}
	if !cred.Equal(cred) || cred.Equal(wire.Credential{}) {
		t.Errorf("Equal: got %v and %v, want true and false", cred.Equal(cred), cred.Equal(wire.Credential{}))
	}
}

func TestMinter(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := wire.NewMinter(make([]byte, n)); err == nil {
			t.Errorf("NewMinter of a %d-byte key: got no error", n)
		}
	}
	key := make([]byte, wire.KeySize)
	for i := range key {
		key[i] = byte(i)
	}
	m, err := wire.NewMinter(key)
	if err != nil {
		t.Fatal(err)
	}
	c := wire.Claim{Role: wire.RoleHolder, ClusterID: "0123456789abcdef", Generation: 1, Limit: 1, LeaseMs: 10000, ID: 0x0000030000000007, Name: "jobs"}
	want := m.Credential(c)
	for i := range key {
		key[i] = 0 // the Minter keeps its own copy
	}
	if got := m.Credential(c); got != want || !m.Verify(c, want) {
		t.Fatalf("the credential changed after the caller cleared its key")
	}
	// Each field, the client key included, changes the credential.
	ck := wire.ClientKeyHash([]byte("spki"))
	for _, edit := range []func(*wire.Claim){
		func(c *wire.Claim) { c.Role = wire.RoleWaiter },
		func(c *wire.Claim) { c.ClusterID = "" },
		func(c *wire.Claim) { c.Generation = 2 },
		func(c *wire.Claim) { c.Shared = true },
		func(c *wire.Claim) { c.Limit = 2 },
		func(c *wire.Claim) { c.LeaseMs = 9999 },
		func(c *wire.Claim) { c.ID++ },
		func(c *wire.Claim) { c.ClientKey = ck[:] },
		func(c *wire.Claim) { c.Name = "jobz" },
	} {
		d := c
		edit(&d)
		if m.Verify(d, want) {
			t.Errorf("%+v verifies with the credential of %+v", d, c)
		}
	}
	// Safe for concurrent use: every goroutine gets the same answer.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if m.Credential(c) != want {
					t.Error("a concurrent computation differs")
					return
				}
			}
		})
	}
	wg.Wait()
	if raceEnabled {
		return // the race detector's sync.Pool drops items on purpose
	}
	if n := testing.AllocsPerRun(1000, func() { _ = m.Credential(c) }); n != 0 {
		t.Errorf("Credential: %v allocations per run, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = m.Verify(c, want) }); n != 0 {
		t.Errorf("Verify: %v allocations per run, want 0", n)
	}
}

func TestCredentialMessagePanics(t *testing.T) {
	good := wire.Claim{Role: wire.RoleWaiter, Generation: 1, Limit: 1, LeaseMs: 1, ID: 1, Name: "a"}
	if got := wire.AppendCredentialMessage(nil, good); len(got) != 14+1+1+4+1+2+4+8+1+1+1 {
		t.Errorf("message of the smallest claim: %d bytes", len(got))
	}
	for _, tt := range []struct {
		what string
		edit func(*wire.Claim)
	}{
		{"role 0", func(c *wire.Claim) { c.Role = 0 }},
		{"cluster id of 256 bytes", func(c *wire.Claim) { c.ClusterID = strings.Repeat("c", 256) }},
		{"client key of 31 bytes", func(c *wire.Claim) { c.ClientKey = make([]byte, 31) }},
		{"empty name", func(c *wire.Claim) { c.Name = "" }},
		{"name of 256 bytes", func(c *wire.Claim) { c.Name = strings.Repeat("n", 256) }},
	} {
		t.Run(tt.what, func(t *testing.T) {
			c := good
			tt.edit(&c)
			defer func() {
				if recover() == nil {
					t.Errorf("AppendCredentialMessage of %+v: no panic", c)
				}
			}()
			wire.AppendCredentialMessage(nil, c)
		})
	}
	// The longest message fits the Minter's buffer.
	longest := wire.Claim{Role: wire.RoleHolder, ClusterID: strings.Repeat("c", 255), ClientKey: make([]byte, 32), Name: strings.Repeat("n", 255)}
	if n := len(wire.AppendCredentialMessage(nil, longest)); n != 14+1+1+255+4+1+2+4+8+1+32+1+255 {
		t.Errorf("longest message: %d bytes", n)
	}
}
