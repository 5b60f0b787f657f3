package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/batonlock/baton/clients/go/wire"
)

// vector is one row of docs/protocol.md's "Test vectors", with the fields the
// bytes stand for. Each row is tested both ways: encode gives exactly the
// bytes, Split and Decode of the bytes give the fields.
type vector struct {
	what string
	hex  string
	// refused marks the header the server must refuse unread; no other field
	// applies.
	refused bool

	typ      wire.Type
	acquire  wire.Acquire // TypeAcquire
	position uint32       // TypeWaiting
	push     bool         // TypeAcquired
	token    uint64       // TypeAcquired
	errCode  wire.Code    // TypeError
	errMsg   string       // TypeError
}

// vectors is every row of docs/protocol.md's "Test vectors" section, in order.
var vectors = []vector{
	{
		what:    "ACQUIRE v1, no flags, lease 2000 ms, name jobs, no owner",
		hex:     "01 00 0b 01 00 00 00 07 d0 04 6a 6f 62 73",
		typ:     wire.TypeAcquire,
		acquire: wire.Acquire{Version: 1, Flags: 0, LeaseMs: 2000, Name: "jobs"},
	},
	{
		what:    "ACQUIRE v1, NOWAIT, lease 1 ms, name a, owner h:1",
		hex:     "01 00 0b 01 01 00 00 00 01 01 61 68 3a 31",
		typ:     wire.TypeAcquire,
		acquire: wire.Acquire{Version: 1, Flags: wire.FlagNoWait, LeaseMs: 1, Name: "a", Owner: "h:1"},
	},
	{
		what: "HEARTBEAT",
		hex:  "02 00 00",
		typ:  wire.TypeHeartbeat,
	},
	{
		what:     "WAITING position 3",
		hex:      "81 00 05 00 00 00 00 03",
		typ:      wire.TypeWaiting,
		position: 3,
	},
	{
		what:  "ACQUIRED reply, token 1",
		hex:   "82 00 09 00 00 00 00 00 00 00 00 01",
		typ:   wire.TypeAcquired,
		token: 1,
	},
	{
		what:  "ACQUIRED push, token 0x0100000000000002",
		hex:   "82 00 09 01 01 00 00 00 00 00 00 02",
		typ:   wire.TypeAcquired,
		push:  true,
		token: 0x0100000000000002,
	},
	{
		what:    "ERROR SHUTDOWN bye",
		hex:     "80 00 04 01 62 79 65",
		typ:     wire.TypeError,
		errCode: wire.CodeShutdown,
		errMsg:  "bye",
	},
	{
		what:    "ERROR NOT_LEADER 127.0.0.1:7170",
		hex:     "80 00 0f 03 31 32 37 2e 30 2e 30 2e 31 3a 37 31 37 30",
		typ:     wire.TypeError,
		errCode: wire.CodeNotLeader,
		errMsg:  "127.0.0.1:7170",
	},
	{
		what:    "a header the server must refuse unread (length 1025)",
		hex:     "02 04 01",
		refused: true,
	},
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(fmt.Sprintf("bad hex %q: %v", s, err))
	}
	return b
}

// encode builds v's frame with the package's encoders.
func (v vector) encode() ([]byte, error) {
	switch v.typ {
	case wire.TypeAcquire:
		return wire.AppendAcquire(nil, v.acquire)
	case wire.TypeHeartbeat:
		return wire.AppendHeartbeat(nil), nil
	case wire.TypeWaiting:
		return wire.AppendWaiting(nil, v.position), nil
	case wire.TypeAcquired:
		return wire.AppendAcquired(nil, v.push, v.token), nil
	case wire.TypeError:
		return wire.AppendError(nil, v.errCode, v.errMsg), nil
	}
	return nil, fmt.Errorf("no encoder for %v", v.typ)
}

// wantCode checks that err is a *wire.Error with code want.
func wantCode(t *testing.T, err error, want wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("got error %v (%T), want a *wire.Error with code %v", err, err, want)
	}
	if we.Code != want {
		t.Fatalf("got code %v (%v), want %v", we.Code, err, want)
	}
}

func TestVectorsEncode(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.what, func(t *testing.T) {
			want := mustHex(v.hex)
			if v.refused {
				// The encoder side of the oversize row: no encoder can make
				// such a frame; AppendFrame refuses it as a caller bug.
				payload := make([]byte, 1025)
				defer func() {
					if recover() == nil {
						t.Fatalf("AppendFrame with a 1025-byte payload did not panic")
					}
				}()
				wire.AppendFrame(nil, wire.TypeHeartbeat, payload)
				return
			}
			got, err := v.encode()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encode: got % x, want % x", got, want)
			}
			// AppendFrame around the vector's payload gives the same bytes.
			if got := wire.AppendFrame(nil, v.typ, want[wire.HeaderSize:]); !bytes.Equal(got, want) {
				t.Fatalf("AppendFrame: got % x, want % x", got, want)
			}
		})
	}
}

func TestVectorsDecode(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.what, func(t *testing.T) {
			b := mustHex(v.hex)
			if v.refused {
				h, err := wire.ParseHeader(b)
				wantCode(t, err, wire.CodeProtocol)
				if h.Length != 1025 {
					t.Errorf("ParseHeader: got length %d, want 1025", h.Length)
				}
				_, p, n, err := wire.Split(b)
				wantCode(t, err, wire.CodeProtocol)
				if n != 0 || p != nil {
					t.Errorf("Split: got n %d, payload % x, want 0, nil", n, p)
				}
				// Refused as soon as the header is there, whatever follows.
				_, _, _, err = wire.Split(append(b, make([]byte, 1025)...))
				wantCode(t, err, wire.CodeProtocol)
				return
			}
			h, err := wire.ParseHeader(b)
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if h.Type != v.typ || int(h.Length) != len(b)-wire.HeaderSize {
				t.Fatalf("ParseHeader: got %v/%d, want %v/%d", h.Type, h.Length, v.typ, len(b)-wire.HeaderSize)
			}
			// A trailing byte of the next frame must not be taken.
			buf := append(append([]byte(nil), b...), 0x02)
			h2, p, n, err := wire.Split(buf)
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if h2 != h || n != len(b) || !bytes.Equal(p, b[wire.HeaderSize:]) {
				t.Fatalf("Split: got %+v n=%d payload % x, want %+v n=%d payload % x", h2, n, p, h, len(b), b[wire.HeaderSize:])
			}
			if cap(p) != len(p) {
				t.Errorf("Split: payload cap %d, want %d (appending to it must not overwrite the next frame)", cap(p), len(p))
			}
			switch v.typ {
			case wire.TypeAcquire:
				a, err := wire.DecodeAcquire(p)
				if err != nil {
					t.Fatalf("DecodeAcquire: %v", err)
				}
				if a != v.acquire {
					t.Fatalf("DecodeAcquire: got %+v, want %+v", a, v.acquire)
				}
				if got, want := a.NoWait(), v.acquire.Flags&wire.FlagNoWait != 0; got != want {
					t.Fatalf("NoWait: got %v, want %v", got, want)
				}
			case wire.TypeHeartbeat:
				if err := wire.CheckHeartbeat(p); err != nil {
					t.Fatalf("CheckHeartbeat: %v", err)
				}
			case wire.TypeWaiting:
				pos, err := wire.DecodeWaiting(p)
				if err != nil {
					t.Fatalf("DecodeWaiting: %v", err)
				}
				if pos != v.position {
					t.Fatalf("DecodeWaiting: got position %d, want %d", pos, v.position)
				}
			case wire.TypeAcquired:
				push, tok, err := wire.DecodeAcquired(p)
				if err != nil {
					t.Fatalf("DecodeAcquired: %v", err)
				}
				if push != v.push || tok != v.token {
					t.Fatalf("DecodeAcquired: got push %v token %#x, want push %v token %#x", push, tok, v.push, v.token)
				}
			case wire.TypeError:
				e, err := wire.DecodeError(p)
				if err != nil {
					t.Fatalf("DecodeError: %v", err)
				}
				if e.Code != v.errCode || e.Msg != v.errMsg {
					t.Fatalf("DecodeError: got %v %q, want %v %q", e.Code, e.Msg, v.errCode, v.errMsg)
				}
			default:
				t.Fatalf("no decoder for %v", v.typ)
			}
		})
	}
}

// TestSplitPartial feeds every vector one byte short, down to nothing: Split
// must ask for more (n 0, no error) until the frame is whole.
func TestSplitPartial(t *testing.T) {
	for _, v := range vectors {
		b := mustHex(v.hex)
		for i := 0; i < len(b); i++ {
			h, p, n, err := wire.Split(b[:i])
			if err != nil || n != 0 || p != nil {
				t.Errorf("%s: Split of %d of %d bytes: got %+v % x n=%d err=%v, want n=0 and no error", v.what, i, len(b), h, p, n, err)
			}
		}
	}
	// The largest payload allowed is taken whole.
	frame := wire.AppendFrame(nil, wire.TypeError, make([]byte, wire.MaxPayload))
	h, p, n, err := wire.Split(frame)
	if err != nil || n != wire.MaxFrame || len(p) != wire.MaxPayload || h.Length != wire.MaxPayload {
		t.Fatalf("Split of a %d-byte payload: got %+v len %d n=%d err=%v, want n=%d", wire.MaxPayload, h, len(p), n, err, wire.MaxFrame)
	}
	// Every length above the limit is refused.
	for _, l := range []int{wire.MaxPayload + 1, 0x1000, 0xffff} {
		_, _, _, err := wire.Split([]byte{0x02, byte(l >> 8), byte(l)})
		wantCode(t, err, wire.CodeProtocol)
	}
}

func TestAppendKeepsDst(t *testing.T) {
	prefix := []byte("pre")
	check := func(what string, got []byte, frame string) {
		t.Helper()
		want := append(append([]byte(nil), prefix...), mustHex(frame)...)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got % x, want % x", what, got, want)
		}
	}
	dst := func() []byte { return append([]byte(nil), prefix...) }
	check("AppendHeartbeat", wire.AppendHeartbeat(dst()), "02 00 00")
	check("AppendWaiting", wire.AppendWaiting(dst(), 3), "81 00 05 00 00 00 00 03")
	check("AppendAcquired", wire.AppendAcquired(dst(), false, 1), "82 00 09 00 00 00 00 00 00 00 00 01")
	check("AppendError", wire.AppendError(dst(), wire.CodeShutdown, "bye"), "80 00 04 01 62 79 65")
	got, err := wire.AppendAcquire(dst(), wire.Acquire{Version: 1, LeaseMs: 2000, Name: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	check("AppendAcquire", got, "01 00 0b 01 00 00 00 07 d0 04 6a 6f 62 73")
}

// acquirePayloadV2 builds a version 2 ACQUIRE payload byte by byte, without
// the checks of AppendAcquire, so malformed ones can be made.
func acquirePayloadV2(version, flags byte, lease uint32, limit uint16, name, owner string) []byte {
	p := []byte{version, flags, byte(lease >> 24), byte(lease >> 16), byte(lease >> 8), byte(lease), byte(limit >> 8), byte(limit), byte(len(name))}
	p = append(p, name...)
	return append(p, owner...)
}

// acquirePayload builds a version 1 ACQUIRE payload the same way.
func acquirePayload(version, flags byte, lease uint32, name, owner string) []byte {
	p := []byte{version, flags, byte(lease >> 24), byte(lease >> 16), byte(lease >> 8), byte(lease), byte(len(name))}
	p = append(p, name...)
	return append(p, owner...)
}

func TestDecodeAcquireErrors(t *testing.T) {
	ok := func(name, owner string) []byte { return acquirePayload(1, 0, 1000, name, owner) }
	tests := []struct {
		what string
		p    []byte
		want wire.Code
	}{
		{"nil payload", nil, wire.CodeProtocol},
		{"empty payload", []byte{}, wire.CodeProtocol},
		{"version only", []byte{1}, wire.CodeProtocol},
		{"6 bytes", []byte{1, 0, 0, 0, 3, 0xe8}, wire.CodeProtocol},
		{"name_len 4, 2 name bytes", ok("jobs", "")[:9], wire.CodeProtocol},
		{"name_len 255, no name", []byte{1, 0, 0, 0, 0, 1, 255}, wire.CodeProtocol},
		{"version 3, 1 byte", []byte{3}, wire.CodeVersion},
		{"version 0", acquirePayload(0, 0, 1000, "jobs", ""), wire.CodeVersion},
		{"version 3", acquirePayload(3, 0, 1000, "jobs", ""), wire.CodeVersion},
		{"version 255, short", []byte{255, 0, 0}, wire.CodeVersion},
		// Version 2: limit u16 after lease_ms, so the fixed part is 9 bytes.
		{"v2, version only", []byte{2}, wire.CodeProtocol},
		{"v2, 8 bytes", []byte{2, 2, 0, 0, 3, 0xe8, 0, 3}, wire.CodeProtocol},
		{"v2, the v1 layout", acquirePayload(2, 0, 1000, "jobs", ""), wire.CodeProtocol},
		{"v2, name_len 4, 2 name bytes", acquirePayloadV2(2, 0, 1000, 1, "jobs", "")[:11], wire.CodeProtocol},
		{"v2, limit 0", acquirePayloadV2(2, wire.FlagShared, 1000, 0, "jobs", ""), wire.CodeBadRequest},
		{"v2, exclusive limit 0", acquirePayloadV2(2, 0, 1000, 0, "jobs", ""), wire.CodeBadRequest},
		{"v2, limit 2 without SHARED", acquirePayloadV2(2, 0, 1000, 2, "jobs", ""), wire.CodeBadRequest},
		{"v2, limit 65535 without SHARED", acquirePayloadV2(2, wire.FlagNoWait, 1000, 65535, "jobs", ""), wire.CodeBadRequest},
		{"v2, flag 0x04", acquirePayloadV2(2, 0x04|wire.FlagShared, 1000, 3, "jobs", ""), wire.CodeBadRequest},
		{"v2, lease 0", acquirePayloadV2(2, wire.FlagShared, 0, 3, "jobs", ""), wire.CodeBadRequest},
		{"v2, empty name", acquirePayloadV2(2, wire.FlagShared, 1000, 3, "", ""), wire.CodeBadRequest},
		{"v2, owner with newline", acquirePayloadV2(2, wire.FlagShared, 1000, 3, "jobs", "h\n"), wire.CodeBadRequest},
		{"v1, SHARED is an unknown flag", acquirePayload(1, wire.FlagShared, 1000, "jobs", ""), wire.CodeBadRequest},
		{"flag 0x02", acquirePayload(1, 0x02, 1000, "jobs", ""), wire.CodeBadRequest},
		{"flag 0x80 with NOWAIT", acquirePayload(1, 0x81, 1000, "jobs", ""), wire.CodeBadRequest},
		{"flags 0xff", acquirePayload(1, 0xff, 1000, "jobs", ""), wire.CodeBadRequest},
		{"lease 0", acquirePayload(1, 0, 0, "jobs", ""), wire.CodeBadRequest},
		{"empty name", ok("", ""), wire.CodeBadRequest},
		{"empty name, with owner", ok("", "h:1"), wire.CodeBadRequest},
		{"name with NUL", ok("jo\x00bs", ""), wire.CodeBadRequest},
		{"name with TAB", ok("jo\tbs", ""), wire.CodeBadRequest},
		{"name with newline", ok("jobs\n", ""), wire.CodeBadRequest},
		{"name with 0x1f", ok("\x1fjobs", ""), wire.CodeBadRequest},
		{"name with DEL", ok("jobs\x7f", ""), wire.CodeBadRequest},
		{"name with 0xff", ok("jobs\xff", ""), wire.CodeBadRequest},
		{"name with lone continuation byte", ok("\x80", ""), wire.CodeBadRequest},
		{"name with truncated rune", ok("caf\xc3", ""), wire.CodeBadRequest},
		{"name with overlong NUL", ok("\xc0\x80", ""), wire.CodeBadRequest},
		{"name with surrogate", ok("\xed\xa0\x80", ""), wire.CodeBadRequest},
		{"owner of 256 bytes", ok("jobs", strings.Repeat("o", 256)), wire.CodeBadRequest},
		{"owner of 769 bytes", ok("jobs", strings.Repeat("o", 769)), wire.CodeBadRequest},
		{"owner with newline", ok("jobs", "h:1\n"), wire.CodeBadRequest},
		{"owner with NUL", ok("jobs", "\x00"), wire.CodeBadRequest},
		{"owner with DEL", ok("jobs", "h\x7f"), wire.CodeBadRequest},
		{"owner with bad UTF-8", ok("jobs", "h\xfe1"), wire.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			a, err := wire.DecodeAcquire(tt.p)
			wantCode(t, err, tt.want)
			if a != (wire.Acquire{}) {
				t.Errorf("got %+v with the error, want the zero Acquire", a)
			}
		})
	}
}

func TestDecodeAcquireEdges(t *testing.T) {
	tests := []struct {
		what string
		a    wire.Acquire
	}{
		{"largest lease", wire.Acquire{Version: 1, LeaseMs: 0xffffffff, Name: "x"}},
		{"name of 255 bytes", wire.Acquire{Version: 1, LeaseMs: 1, Name: strings.Repeat("n", 255)}},
		{"owner of 255 bytes", wire.Acquire{Version: 1, LeaseMs: 1, Name: "x", Owner: strings.Repeat("o", 255)}},
		{"both of 255 bytes", wire.Acquire{Version: 1, LeaseMs: 1, Name: strings.Repeat("n", 255), Owner: strings.Repeat("o", 255)}},
		{"space and tilde", wire.Acquire{Version: 1, LeaseMs: 1, Name: " ~", Owner: " ~"}},
		{"multibyte UTF-8", wire.Acquire{Version: 1, LeaseMs: 1, Name: "jobs/été/€/😀", Owner: "höst:1"}},
		{"U+0080 (C1, valid UTF-8, no byte below 0x20)", wire.Acquire{Version: 1, LeaseMs: 1, Name: "\u0080"}},
		{"NOWAIT", wire.Acquire{Version: 1, Flags: wire.FlagNoWait, LeaseMs: 1, Name: "x"}},
		{"v2 shared, the largest limit", wire.Acquire{Version: 2, Flags: wire.FlagShared, LeaseMs: 1, Limit: 65535, Name: "x"}},
		{"v2 shared limit 1", wire.Acquire{Version: 2, Flags: wire.FlagShared, LeaseMs: 1, Limit: 1, Name: "x"}},
		{"v2 shared NOWAIT, both of 255 bytes", wire.Acquire{Version: 2, Flags: wire.FlagShared | wire.FlagNoWait, LeaseMs: 0xffffffff, Limit: 7, Name: strings.Repeat("n", 255), Owner: strings.Repeat("o", 255)}},
		{"v2 exclusive", wire.Acquire{Version: 2, LeaseMs: 1, Limit: 1, Name: "x", Owner: "h:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			frame, err := wire.AppendAcquire(nil, tt.a)
			if err != nil {
				t.Fatalf("AppendAcquire: %v", err)
			}
			h, p, n, err := wire.Split(frame)
			if err != nil || n != len(frame) || h.Type != wire.TypeAcquire {
				t.Fatalf("Split: got %+v n=%d err=%v, want an ACQUIRE of %d bytes", h, n, err, len(frame))
			}
			want := acquirePayload(tt.a.Version, tt.a.Flags, tt.a.LeaseMs, tt.a.Name, tt.a.Owner)
			if tt.a.Version == 2 {
				want = acquirePayloadV2(tt.a.Version, tt.a.Flags, tt.a.LeaseMs, tt.a.Limit, tt.a.Name, tt.a.Owner)
			}
			if !bytes.Equal(p, want) {
				t.Fatalf("payload: got % x, want % x", p, want)
			}
			got, err := wire.DecodeAcquire(p)
			if err != nil {
				t.Fatalf("DecodeAcquire: %v", err)
			}
			if got != tt.a {
				t.Fatalf("DecodeAcquire: got %+v, want %+v", got, tt.a)
			}
		})
	}
}

func TestAppendAcquireChecks(t *testing.T) {
	good := wire.Acquire{Version: 1, LeaseMs: 1, Name: "jobs"}
	tests := []struct {
		what string
		edit func(*wire.Acquire)
		want wire.Code
	}{
		{"version 0", func(a *wire.Acquire) { a.Version = 0 }, wire.CodeVersion},
		{"version 3", func(a *wire.Acquire) { a.Version = 3 }, wire.CodeVersion},
		{"unknown flag", func(a *wire.Acquire) { a.Flags = 0x04 }, wire.CodeBadRequest},
		{"SHARED in version 1", func(a *wire.Acquire) { a.Flags = wire.FlagShared }, wire.CodeBadRequest},
		{"a limit in version 1", func(a *wire.Acquire) { a.Limit = 3 }, wire.CodeBadRequest},
		{"v2 limit 0", func(a *wire.Acquire) { a.Version, a.Flags = 2, wire.FlagShared }, wire.CodeBadRequest},
		{"v2 limit 2 without SHARED", func(a *wire.Acquire) { a.Version, a.Limit = 2, 2 }, wire.CodeBadRequest},
		{"v2 unknown flag", func(a *wire.Acquire) { a.Version, a.Flags, a.Limit = 2, 0x06, 2 }, wire.CodeBadRequest},
		{"lease 0", func(a *wire.Acquire) { a.LeaseMs = 0 }, wire.CodeBadRequest},
		{"empty name", func(a *wire.Acquire) { a.Name = "" }, wire.CodeBadRequest},
		// 256 bytes would not fit name_len: it must be refused, not wrapped.
		{"name of 256 bytes", func(a *wire.Acquire) { a.Name = strings.Repeat("n", 256) }, wire.CodeBadRequest},
		{"name with control", func(a *wire.Acquire) { a.Name = "a\rb" }, wire.CodeBadRequest},
		{"owner of 256 bytes", func(a *wire.Acquire) { a.Owner = strings.Repeat("o", 256) }, wire.CodeBadRequest},
		{"owner bad UTF-8", func(a *wire.Acquire) { a.Owner = "\xc3(" }, wire.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			a := good
			tt.edit(&a)
			dst := []byte("keep")
			got, err := wire.AppendAcquire(dst, a)
			wantCode(t, err, tt.want)
			if string(got) != "keep" {
				t.Errorf("got dst %q, want it unchanged %q", got, "keep")
			}
		})
	}
}

func TestCheckNameOwner(t *testing.T) {
	if err := wire.CheckName("jobs/nightly"); err != nil {
		t.Errorf("CheckName(jobs/nightly): got %v, want nil", err)
	}
	if err := wire.CheckOwner(""); err != nil {
		t.Errorf("CheckOwner(\"\"): got %v, want nil", err)
	}
	for c := 0; c < 0x20; c++ {
		wantCode(t, wire.CheckName("a"+string(rune(c))), wire.CodeBadRequest)
		wantCode(t, wire.CheckOwner(string(rune(c))+"a"), wire.CodeBadRequest)
	}
	wantCode(t, wire.CheckName("\x7f"), wire.CodeBadRequest)
	wantCode(t, wire.CheckOwner("\x7f"), wire.CodeBadRequest)
	// The message names what was wrong and where, for the operator.
	err := wire.CheckName("ab\x01")
	if want := "control byte 0x01 at offset 2"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckName(ab\\x01): got %v, want a message containing %q", err, want)
	}
}

func TestHeartbeat(t *testing.T) {
	if err := wire.CheckHeartbeat(nil); err != nil {
		t.Errorf("CheckHeartbeat(nil): got %v, want nil", err)
	}
	if err := wire.CheckHeartbeat([]byte{}); err != nil {
		t.Errorf("CheckHeartbeat(empty): got %v, want nil", err)
	}
	for _, n := range []int{1, 2, wire.MaxPayload} {
		wantCode(t, wire.CheckHeartbeat(make([]byte, n)), wire.CodeProtocol)
	}
}

func TestDecodeWaiting(t *testing.T) {
	for _, n := range []int{0, 1, 4, 6, 9} {
		pos, err := wire.DecodeWaiting(make([]byte, n))
		wantCode(t, err, wire.CodeProtocol)
		if pos != 0 {
			t.Errorf("DecodeWaiting(%d bytes): got position %d with the error, want 0", n, pos)
		}
	}
	for _, pos := range []uint32{1, 2, 0x01020304, 0xffffffff} {
		frame := wire.AppendWaiting(nil, pos)
		_, p, _, err := wire.Split(frame)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.DecodeWaiting(p)
		if err != nil || got != pos {
			t.Errorf("DecodeWaiting(AppendWaiting(%d)): got %d, %v, want %d, nil", pos, got, err, pos)
		}
		if p[0] != 0 {
			t.Errorf("AppendWaiting(%d): got flags %#x, want 0", pos, p[0])
		}
	}
}

func TestDecodeAcquired(t *testing.T) {
	for _, n := range []int{0, 1, 8, 10, 17} {
		push, tok, err := wire.DecodeAcquired(make([]byte, n))
		wantCode(t, err, wire.CodeProtocol)
		if push || tok != 0 {
			t.Errorf("DecodeAcquired(%d bytes): got %v %d with the error, want false 0", n, push, tok)
		}
	}
	// Token 0 is never granted: both flag values refuse it.
	for _, flags := range []byte{0, wire.FlagPush} {
		p := make([]byte, 9)
		p[0] = flags
		_, _, err := wire.DecodeAcquired(p)
		wantCode(t, err, wire.CodeProtocol)
	}
	for _, tt := range []struct {
		push  bool
		token uint64
	}{{false, 1}, {true, 1}, {false, 1<<40 | 7}, {true, 0xffffffffffffffff}} {
		_, p, _, err := wire.Split(wire.AppendAcquired(nil, tt.push, tt.token))
		if err != nil {
			t.Fatal(err)
		}
		push, tok, err := wire.DecodeAcquired(p)
		if err != nil || push != tt.push || tok != tt.token {
			t.Errorf("round trip of push %v token %#x: got %v %#x %v", tt.push, tt.token, push, tok, err)
		}
	}
}

func TestDecodeError(t *testing.T) {
	for _, n := range []int{0, 1 + wire.MaxErrorMessage + 1, wire.MaxPayload} {
		e, err := wire.DecodeError(make([]byte, n))
		wantCode(t, err, wire.CodeProtocol)
		if e != nil {
			t.Errorf("DecodeError(%d bytes): got %v with the error, want nil", n, e)
		}
	}
	// Code only: an empty message.
	e, err := wire.DecodeError([]byte{byte(wire.CodeKicked)})
	if err != nil || e.Code != wire.CodeKicked || e.Msg != "" {
		t.Errorf("DecodeError(code only): got %v, %v, want KICKED with no message", e, err)
	}
	// The longest message is kept whole.
	long := append([]byte{byte(wire.CodeBusy)}, strings.Repeat("m", wire.MaxErrorMessage)...)
	e, err = wire.DecodeError(long)
	if err != nil || len(e.Msg) != wire.MaxErrorMessage {
		t.Errorf("DecodeError(512-byte message): got %v, want a 512-byte message", err)
	}
	// Invalid UTF-8 is kept readable, its bad bytes replaced.
	e, err = wire.DecodeError([]byte{0x20, 'o', 0xff, 'k'})
	if err != nil || e.Code != wire.CodeProtocol || e.Msg != "o?k" {
		t.Errorf("DecodeError(bad UTF-8): got %v, %v, want PROTOCOL \"o?k\"", e, err)
	}
	// Unknown codes are kept as they are, for Class.
	e, err = wire.DecodeError([]byte{0x2f})
	if err != nil || e.Code != 0x2f || e.Code.Class() != wire.ClassClient {
		t.Errorf("DecodeError(0x2f): got %v, %v, want code 0x2f of class client", e, err)
	}
}

func TestAppendErrorTruncation(t *testing.T) {
	tests := []struct {
		what string
		msg  string
		want string
	}{
		{"empty", "", ""},
		{"512 ASCII bytes kept", strings.Repeat("a", 512), strings.Repeat("a", 512)},
		{"513 ASCII bytes cut to 512", strings.Repeat("a", 513), strings.Repeat("a", 512)},
		{"2-byte rune across 512", strings.Repeat("a", 511) + "é", strings.Repeat("a", 511)},
		{"2-byte rune ending at 512", strings.Repeat("a", 510) + "éz", strings.Repeat("a", 510) + "é"},
		{"3-byte runes", strings.Repeat("€", 200), strings.Repeat("€", 170)},
		{"4-byte rune across 512", strings.Repeat("a", 509) + "😀", strings.Repeat("a", 509)},
		{"4-byte runes", strings.Repeat("😀", 200), strings.Repeat("😀", 128)},
		{"invalid UTF-8 replaced", "bad\xffbyte", "bad?byte"},
		{"invalid UTF-8 replaced, then cut", strings.Repeat("\xff", 600), strings.Repeat("?", 512)},
		{"way over the payload limit", strings.Repeat("x", 5000), strings.Repeat("x", 512)},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			frame := wire.AppendError(nil, wire.CodeLeaseExpired, tt.msg)
			h, p, n, err := wire.Split(frame)
			if err != nil || n != len(frame) || h.Type != wire.TypeError {
				t.Fatalf("Split: got %+v n=%d err=%v, want one ERROR frame of %d bytes", h, n, err, len(frame))
			}
			if len(p) > 1+wire.MaxErrorMessage {
				t.Fatalf("payload of %d bytes, want at most %d", len(p), 1+wire.MaxErrorMessage)
			}
			e, err := wire.DecodeError(p)
			if err != nil {
				t.Fatalf("DecodeError: %v", err)
			}
			if e.Code != wire.CodeLeaseExpired {
				t.Errorf("code: got %v, want %v", e.Code, wire.CodeLeaseExpired)
			}
			if string(p[1:]) != tt.want {
				t.Errorf("message: got %d bytes %q, want %d bytes %q", len(p)-1, p[1:], len(tt.want), tt.want)
			}
			if !utf8.Valid(p[1:]) {
				t.Errorf("message is not valid UTF-8: %q", p[1:])
			}
		})
	}
}

func TestErrorIsAs(t *testing.T) {
	_, err := wire.DecodeAcquire(nil)
	wrapped := fmt.Errorf("session 7: %w", err)

	var we *wire.Error
	if !errors.As(wrapped, &we) || we.Code != wire.CodeProtocol {
		t.Fatalf("errors.As: got %v, want a *wire.Error of code PROTOCOL", we)
	}
	if !errors.Is(wrapped, &wire.Error{Code: wire.CodeProtocol}) {
		t.Errorf("errors.Is(wrapped, PROTOCOL): got false, want true")
	}
	if !errors.Is(wrapped, &wire.Error{Code: wire.CodeProtocol, Msg: "another message"}) {
		t.Errorf("errors.Is ignores Msg: got false, want true")
	}
	if errors.Is(wrapped, &wire.Error{Code: wire.CodeBusy}) {
		t.Errorf("errors.Is(wrapped, BUSY): got true, want false")
	}
	if errors.Is(wrapped, io.EOF) {
		t.Errorf("errors.Is(wrapped, io.EOF): got true, want false")
	}
	// A nil *Error target must answer false, not panic.
	if errors.Is(wrapped, (*wire.Error)(nil)) {
		t.Errorf("errors.Is(wrapped, nil *Error): got true, want false")
	}

	if got, want := (&wire.Error{Code: wire.CodeBusy}).Error(), "baton: BUSY"; got != want {
		t.Errorf("Error(): got %q, want %q", got, want)
	}
	if got, want := (&wire.Error{Code: wire.CodeBadRequest, Msg: "lease 0ms must be at least 1ms"}).Error(), "baton: BAD_REQUEST: lease 0ms must be at least 1ms"; got != want {
		t.Errorf("Error(): got %q, want %q", got, want)
	}
	if got, want := (&wire.Error{Code: 0x7e}).Error(), "baton: 0x7e"; got != want {
		t.Errorf("Error(): got %q, want %q", got, want)
	}
}

func TestCodeClass(t *testing.T) {
	for c := 0; c <= 0xff; c++ {
		code := wire.Code(c)
		var want wire.Class
		switch {
		case c >= 0x01 && c <= 0x0f:
			want = wire.ClassServer
		case c >= 0x10 && c <= 0x1f:
			want = wire.ClassSession
		case c >= 0x20 && c <= 0x2f:
			want = wire.ClassClient
		default:
			want = wire.ClassUnknown
		}
		if got := code.Class(); got != want {
			t.Errorf("Code(%#02x).Class(): got %v, want %v", c, got, want)
		}
	}
	// Every named code sits in the class of docs/protocol.md's table.
	named := map[wire.Code]wire.Class{
		wire.CodeShutdown:      wire.ClassServer,
		wire.CodeOverloaded:    wire.ClassServer,
		wire.CodeLeaseExpired:  wire.ClassSession,
		wire.CodeForceReleased: wire.ClassSession,
		wire.CodeKicked:        wire.ClassSession,
		wire.CodeBusy:          wire.ClassSession,
		wire.CodeNotLeader:     wire.ClassServer,
		wire.CodeProtocol:      wire.ClassClient,
		wire.CodeBadRequest:    wire.ClassClient,
		wire.CodeVersion:       wire.ClassClient,
		wire.CodeUnauthorized:  wire.ClassClient,
		wire.CodeLimitMismatch: wire.ClassClient,
	}
	for c, want := range named {
		if got := c.Class(); got != want {
			t.Errorf("%v.Class(): got %v, want %v", c, got, want)
		}
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{wire.CodeShutdown.String(), "SHUTDOWN"},
		{wire.CodeOverloaded.String(), "OVERLOADED"},
		{wire.CodeLeaseExpired.String(), "LEASE_EXPIRED"},
		{wire.CodeForceReleased.String(), "FORCE_RELEASED"},
		{wire.CodeKicked.String(), "KICKED"},
		{wire.CodeBusy.String(), "BUSY"},
		{wire.CodeProtocol.String(), "PROTOCOL"},
		{wire.CodeBadRequest.String(), "BAD_REQUEST"},
		{wire.CodeVersion.String(), "VERSION"},
		{wire.CodeUnauthorized.String(), "UNAUTHORIZED"},
		{wire.CodeLimitMismatch.String(), "LIMIT_MISMATCH"},
		{wire.Code(0x00).String(), "0x00"},
		{wire.CodeNotLeader.String(), "NOT_LEADER"},
		{wire.Code(0x04).String(), "0x04"},
		{wire.Code(0x2f).String(), "0x2f"},
		{wire.Code(0xff).String(), "0xff"},

		{wire.TypeAcquire.String(), "ACQUIRE"},
		{wire.TypeHeartbeat.String(), "HEARTBEAT"},
		{wire.TypeError.String(), "ERROR"},
		{wire.TypeWaiting.String(), "WAITING"},
		{wire.TypeAcquired.String(), "ACQUIRED"},
		{wire.Type(0x00).String(), "type 0x00"},
		{wire.Type(0x03).String(), "type 0x03"},
		{wire.Type(0xfe).String(), "type 0xfe"},

		{wire.ClassServer.String(), "server condition"},
		{wire.ClassSession.String(), "session ended"},
		{wire.ClassClient.String(), "client error"},
		{wire.ClassUnknown.String(), "unknown"},
		{wire.Class(9).String(), "unknown"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestAppendFrame(t *testing.T) {
	got := wire.AppendFrame([]byte{0xaa}, wire.Type(0x7f), []byte{1, 2, 3})
	if want := []byte{0xaa, 0x7f, 0, 3, 1, 2, 3}; !bytes.Equal(got, want) {
		t.Errorf("got % x, want % x", got, want)
	}
	got = wire.AppendFrame(nil, wire.TypeError, make([]byte, 0x0123))
	if got[1] != 0x01 || got[2] != 0x23 {
		t.Errorf("length bytes: got % x, want 01 23", got[1:3])
	}
}
