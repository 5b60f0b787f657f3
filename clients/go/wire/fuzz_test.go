package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/batonlock/baton/clients/go/wire"
)

// splitAll feeds chunks one after the other into a growing buffer, as a
// reader fed by short reads would, and takes every complete frame as soon as
// it is there. It returns the frames (header and payload, copied) and the
// error that stopped it.
func splitAll(t *testing.T, chunks ...[]byte) ([][]byte, error) {
	t.Helper()
	var frames [][]byte
	var buf []byte
	for _, c := range chunks {
		buf = append(buf, c...)
		for {
			h, p, n, err := wire.Split(buf)
			if err != nil {
				if n != 0 || p != nil {
					t.Fatalf("Split error %v came with n=%d payload % x, want 0, nil", err, n, p)
				}
				return frames, err
			}
			if n == 0 {
				if p != nil {
					t.Fatalf("Split asked for more but gave payload % x", p)
				}
				break
			}
			if h.Length > wire.MaxPayload || len(p) != int(h.Length) || n != wire.HeaderSize+len(p) || n > len(buf) {
				t.Fatalf("Split: header %+v, payload of %d bytes, n=%d of %d buffered: payload over %d or inconsistent", h, len(p), n, len(buf), wire.MaxPayload)
			}
			frames = append(frames, bytes.Clone(buf[:n]))
			buf = buf[n:]
		}
	}
	return frames, nil
}

// checkFrame decodes one whole frame by its type and checks what holds for
// every input: no panic, errors are *wire.Error of the documented codes, and
// what decodes cleanly re-encodes to the same bytes.
func checkFrame(t *testing.T, frame []byte) {
	t.Helper()
	h, err := wire.ParseHeader(frame)
	if err != nil {
		t.Fatalf("ParseHeader of a frame Split took: %v", err)
	}
	p := frame[wire.HeaderSize:]
	switch h.Type {
	case wire.TypeAcquire:
		a2, err2 := wire.DecodeAcquire(p)
		a, err := wire.DecodeAcquireUpTo(p, wire.Version3)
		// Versions 1 and 2 decode alike through both, to the byte of the
		// error message; version 3 only through DecodeAcquireUpTo.
		if (len(p) == 0 || p[0] == wire.Version1 || p[0] == wire.Version2) && (a != a2 || fmt.Sprint(err) != fmt.Sprint(err2)) {
			t.Fatalf("ACQUIRE % x: DecodeAcquire %+v %v, DecodeAcquireUpTo %+v %v", p, a2, err2, a, err)
		}
		if len(p) > 0 && p[0] == wire.Version3 && err2 == nil {
			t.Fatalf("DecodeAcquire took a version 3 ACQUIRE % x", p)
		}
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || (we.Code != wire.CodeProtocol && we.Code != wire.CodeVersion && we.Code != wire.CodeBadRequest) {
				t.Fatalf("DecodeAcquireUpTo(% x): got %v, want a PROTOCOL, VERSION or BAD_REQUEST *wire.Error", p, err)
			}
			return
		}
		again, err := wire.AppendAcquire(nil, a)
		if err != nil {
			t.Fatalf("AppendAcquire(%+v) of a decoded ACQUIRE: %v", a, err)
		}
		if !bytes.Equal(again, frame) {
			t.Fatalf("ACQUIRE re-encoded: got % x, want % x", again, frame)
		}
	case wire.TypeHeartbeat:
		if err := wire.CheckHeartbeat(p); (err == nil) != (len(p) == 0) {
			t.Fatalf("CheckHeartbeat of %d bytes: got %v", len(p), err)
		}
	case wire.TypeWaiting:
		if w, err := wire.DecodeWaitingV3(p); err != nil {
			wantCode(t, err, wire.CodeProtocol)
		} else if p[0]&^wire.FlagTicket == 0 {
			if again := wire.AppendWaitingV3(nil, w); !bytes.Equal(again, frame) {
				t.Fatalf("WAITING (version 3) re-encoded: got % x, want % x", again, frame)
			}
		}
		pos, err := wire.DecodeWaiting(p)
		if err != nil {
			wantCode(t, err, wire.CodeProtocol)
			return
		}
		if p[0] == 0 {
			if again := wire.AppendWaiting(nil, pos); !bytes.Equal(again, frame) {
				t.Fatalf("WAITING re-encoded: got % x, want % x", again, frame)
			}
		}
	case wire.TypeAcquired:
		if a, err := wire.DecodeAcquiredV3(p); err != nil {
			wantCode(t, err, wire.CodeProtocol)
		} else if p[0]&^(wire.FlagPush|wire.FlagCredential) == 0 {
			if again := wire.AppendAcquiredV3(nil, a); !bytes.Equal(again, frame) {
				t.Fatalf("ACQUIRED (version 3) re-encoded: got % x, want % x", again, frame)
			}
		}
		push, tok, err := wire.DecodeAcquired(p)
		if err != nil {
			wantCode(t, err, wire.CodeProtocol)
			return
		}
		if tok == 0 {
			t.Fatalf("DecodeAcquired gave token 0")
		}
		if p[0]&^wire.FlagPush == 0 {
			if again := wire.AppendAcquired(nil, push, tok); !bytes.Equal(again, frame) {
				t.Fatalf("ACQUIRED re-encoded: got % x, want % x", again, frame)
			}
		}
	case wire.TypeError:
		e, err := wire.DecodeError(p)
		if err != nil {
			wantCode(t, err, wire.CodeProtocol)
			return
		}
		if !utf8.ValidString(e.Msg) || len(e.Msg) > wire.MaxErrorMessage {
			t.Fatalf("DecodeError: message of %d bytes %q: want valid UTF-8 of at most %d", len(e.Msg), e.Msg, wire.MaxErrorMessage)
		}
		if utf8.Valid(p[1:]) {
			if again := wire.AppendError(nil, e.Code, e.Msg); !bytes.Equal(again, frame) {
				t.Fatalf("ERROR re-encoded: got % x, want % x", again, frame)
			}
		}
	}
}

// FuzzSplit feeds each input whole and in two halves (as nats-server's
// parser fuzzer does) to catch state carried wrongly across short reads.
// Its seed corpus is testdata/fuzz/FuzzSplit (the frames of
// testdata/vectors.json among them, version 3's as v3-*); crashers found
// go there too.
func FuzzSplit(f *testing.F) {
	var stream []byte
	for _, v := range vectors {
		b := mustHex(v.hex)
		f.Add(b)
		stream = append(stream, b...)
	}
	f.Add(stream)
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, wholeErr := splitAll(t, data)
		half := len(data) / 2
		halves, halvesErr := splitAll(t, data[:half], data[half:])
		if len(whole) != len(halves) {
			t.Fatalf("frames: got %d in halves, want %d as found whole", len(halves), len(whole))
		}
		for i := range whole {
			if !bytes.Equal(whole[i], halves[i]) {
				t.Fatalf("frame %d: got % x in halves, want % x as found whole", i, halves[i], whole[i])
			}
		}
		if fmt.Sprint(wholeErr) != fmt.Sprint(halvesErr) {
			t.Fatalf("error: got %v in halves, want %v as found whole", halvesErr, wholeErr)
		}
		if wholeErr != nil {
			wantCode(t, wholeErr, wire.CodeProtocol)
		}
		for _, fr := range whole {
			checkFrame(t, fr)
		}
		// Any payload, even a bad one, goes through every decoder unharmed.
		if len(data) <= wire.MaxPayload {
			_, _ = wire.DecodeAcquire(data)
			_, _ = wire.DecodeAcquireUpTo(data, wire.Version3)
			_, _ = wire.DecodeWaiting(data)
			_, _ = wire.DecodeWaitingV3(data)
			_, _, _ = wire.DecodeAcquired(data)
			_, _ = wire.DecodeAcquiredV3(data)
			_, _ = wire.DecodeError(data)
			_ = wire.CheckHeartbeat(data)
		}
	})
}
