package wire_test

import (
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

var sink []byte

func BenchmarkParseHeader(b *testing.B) {
	frame := wire.AppendHeartbeat(nil)
	b.ReportAllocs()
	for b.Loop() {
		h, err := wire.ParseHeader(frame)
		if err != nil || h.Type != wire.TypeHeartbeat {
			b.Fatal(h, err)
		}
	}
}

func BenchmarkDecodeAcquire(b *testing.B) {
	_, p, _, err := wire.Split(mustHex(vectors[1].hex))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		a, err := wire.DecodeAcquire(p)
		if err != nil || a.LeaseMs != 1 {
			b.Fatal(a, err)
		}
	}
}

func BenchmarkAppendHeartbeat(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendHeartbeat(buf[:0])
	}
	sink = buf
}

func BenchmarkAppendAcquired(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendAcquired(buf[:0], true, 0x0100000000000002)
	}
	sink = buf
}

func BenchmarkAppendWaiting(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendWaiting(buf[:0], 3)
	}
	sink = buf
}

// BenchmarkSplitReply is the client's side of a heartbeat: find the reply
// frame in the read buffer and decode it.
func BenchmarkSplitReply(b *testing.B) {
	buf := wire.AppendAcquired(nil, false, 42)
	b.ReportAllocs()
	for b.Loop() {
		h, p, n, err := wire.Split(buf)
		if err != nil || n != len(buf) || h.Type != wire.TypeAcquired {
			b.Fatal(h, n, err)
		}
		if _, tok, err := wire.DecodeAcquired(p); err != nil || tok != 42 {
			b.Fatal(tok, err)
		}
	}
}

func BenchmarkAppendAcquire(b *testing.B) {
	buf := make([]byte, 0, wire.MaxFrame)
	a := wire.Acquire{Version: wire.Version, LeaseMs: 10000, Name: "jobs/nightly", Owner: "host:1234"}
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = wire.AppendAcquire(buf[:0], a); err != nil {
			b.Fatal(err)
		}
	}
	sink = buf
}

// benchClaim is the claim of the first credential vector, with a client
// key, as a server under mutual TLS computes it.
func benchClaim() (*wire.Minter, wire.Claim) {
	key := make([]byte, wire.KeySize)
	for i := range key {
		key[i] = byte(i)
	}
	m, err := wire.NewMinter(key)
	if err != nil {
		panic(err)
	}
	ck := wire.ClientKeyHash([]byte("a client certificate's SubjectPublicKeyInfo"))
	return m, wire.Claim{Role: wire.RoleHolder, ClusterID: "0123456789abcdef", Generation: 1, Limit: 1,
		LeaseMs: 10000, ID: 0x0000030000000007, ClientKey: ck[:], Name: "jobs/nightly"}
}

// BenchmarkCredential is what a version 3 grant costs the server on top of
// the grant: one credential.
func BenchmarkCredential(b *testing.B) {
	m, c := benchClaim()
	b.ReportAllocs()
	for b.Loop() {
		c.ID++
		_ = m.Credential(c)
	}
}

// BenchmarkCredentialParallel is the same from every core at once: the
// Minter's pool keeps one state per goroutine.
func BenchmarkCredentialParallel(b *testing.B) {
	m, c := benchClaim()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := c
		for pb.Next() {
			c.ID++
			_ = m.Credential(c)
		}
	})
}

// BenchmarkVerify is the check of a resume's credential.
func BenchmarkVerify(b *testing.B) {
	m, c := benchClaim()
	cred := m.Credential(c)
	b.ReportAllocs()
	for b.Loop() {
		if !m.Verify(c, cred) {
			b.Fatal("the credential does not verify")
		}
	}
}

func BenchmarkDecodeAcquireResume(b *testing.B) {
	frame, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version3, Flags: wire.FlagResume | wire.FlagHeld,
		LeaseMs: 10000, Limit: 1, Resume: wire.Resume{ID: 7, Generation: 1, Attempt: 1}, Name: "jobs/nightly", Owner: "host:1234"})
	if err != nil {
		b.Fatal(err)
	}
	_, p, _, _ := wire.Split(frame)
	b.ReportAllocs()
	for b.Loop() {
		a, err := wire.DecodeAcquireUpTo(p, wire.Version3)
		if err != nil || a.Resume.ID != 7 {
			b.Fatal(a, err)
		}
	}
}

// BenchmarkAcquiredV3 is a grant with its credential, encoded by the
// server and decoded by the client.
func BenchmarkAcquiredV3(b *testing.B) {
	buf := make([]byte, 0, 64)
	a := wire.Acquired{Token: 7, WithCredential: true, Generation: 1}
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendAcquiredV3(buf[:0], a)
		if got, err := wire.DecodeAcquiredV3(buf[wire.HeaderSize:]); err != nil || got.Token != 7 {
			b.Fatal(got, err)
		}
	}
	sink = buf
}
