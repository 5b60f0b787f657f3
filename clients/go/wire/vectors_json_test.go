package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

// Vectors is testdata/vectors.json: the wire vectors that the Go, Python
// and TypeScript tests all read. The top level is version 1; Version2
// holds what version 2 adds, in the same shapes.
type Vectors struct {
	VectorSections
	Version2 VectorSections `json:"version_2"`
}

// VectorSections are the sections of one protocol version.
type VectorSections struct {
	Frames []struct {
		What   string         `json:"what"`
		Hex    string         `json:"hex"`
		Type   string         `json:"type"`
		Fields map[string]any `json:"fields"`
	} `json:"frames"`
	RefusedHeaders []struct {
		What string `json:"what"`
		Hex  string `json:"hex"`
	} `json:"refused_headers"`
	BadFrames []struct {
		What  string `json:"what"`
		Hex   string `json:"hex"`
		Error string `json:"error"`
		First bool   `json:"first"`
	} `json:"bad_frames"`
	BadAcquire []struct {
		What     string `json:"what"`
		Name     string `json:"name"`
		NameHex  string `json:"name_hex"`
		LeaseMs  uint32 `json:"lease_ms"`
		Owner    string `json:"owner"`
		OwnerHex string `json:"owner_hex"`
		Shared   bool   `json:"shared"` // version 2
		Limit    int    `json:"limit"`  // version 2
		Error    string `json:"error"`
		Hex      string `json:"hex"`
	} `json:"bad_acquire"`
	ErrorCodes []struct {
		Code  int    `json:"code"`
		Name  string `json:"name"`
		Class string `json:"class"`
	} `json:"error_codes"`
}

func loadVectors(t *testing.T) Vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v Vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("testdata/vectors.json: %v", err)
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

// TestVectorsFile decodes every frame of the shared vectors file to its
// fields and encodes the fields back to the same bytes, for version 1 and
// for what version 2 adds.
func TestVectorsFile(t *testing.T) {
	v := loadVectors(t)
	if len(v.Frames) < 15 {
		t.Fatalf("%d frames in the vectors file, want the table of docs/protocol.md and more", len(v.Frames))
	}
	if len(v.Version2.Frames) < 3 || len(v.Version2.BadFrames) == 0 || len(v.Version2.ErrorCodes) == 0 {
		t.Fatalf("version_2: %d frames, %d bad frames, %d error codes, want docs/protocol.md's version 2 vectors",
			len(v.Version2.Frames), len(v.Version2.BadFrames), len(v.Version2.ErrorCodes))
	}
	t.Run("version 1", func(t *testing.T) { checkSections(t, v.VectorSections, wire.Version1) })
	t.Run("version 2", func(t *testing.T) { checkSections(t, v.Version2, wire.Version2) })
}

func checkSections(t *testing.T, v VectorSections, version uint8) {
	for _, f := range v.Frames {
		want := unhex(t, f.Hex)
		h, payload, n, err := wire.Split(want)
		if err != nil || n != len(want) {
			t.Errorf("%s: Split: n %d err %v, want one whole frame", f.What, n, err)
			continue
		}
		var got []byte
		switch f.Type {
		case "ACQUIRE":
			a, err := wire.DecodeAcquire(payload)
			if err != nil || h.Type != wire.TypeAcquire {
				t.Errorf("%s: decode: %v (type %v)", f.What, err, h.Type)
				continue
			}
			if a.LeaseMs != uint32(f.Fields["lease_ms"].(float64)) || a.Name != f.Fields["name"] ||
				a.Owner != f.Fields["owner"] || a.NoWait() != f.Fields["nowait"] || int(a.Version) != int(f.Fields["version"].(float64)) {
				t.Errorf("%s: decoded %+v, want %v", f.What, a, f.Fields)
			}
			if a.Version != version {
				t.Errorf("%s: version %d in the section of version %d", f.What, a.Version, version)
			}
			if version == wire.Version2 && (a.Shared() != f.Fields["shared"] || int(a.Limit) != int(f.Fields["limit"].(float64))) {
				t.Errorf("%s: decoded shared %v limit %d, want %v", f.What, a.Shared(), a.Limit, f.Fields)
			}
			got, err = wire.AppendAcquire(nil, a)
			if err != nil {
				t.Errorf("%s: encode: %v", f.What, err)
			}
		case "HEARTBEAT":
			if h.Type != wire.TypeHeartbeat || wire.CheckHeartbeat(payload) != nil {
				t.Errorf("%s: not a valid HEARTBEAT", f.What)
			}
			got = wire.AppendHeartbeat(nil)
		case "WAITING":
			pos, err := wire.DecodeWaiting(payload)
			if err != nil || pos != uint32(f.Fields["position"].(float64)) {
				t.Errorf("%s: position %d err %v, want %v", f.What, pos, err, f.Fields["position"])
			}
			got = wire.AppendWaiting(nil, pos)
		case "ACQUIRED":
			push, tok, err := wire.DecodeAcquired(payload)
			wantTok, perr := strconv.ParseUint(f.Fields["token"].(string), 10, 64)
			if err != nil || perr != nil || tok != wantTok || push != f.Fields["push"] {
				t.Errorf("%s: push %v token %d err %v, want %v", f.What, push, tok, err, f.Fields)
			}
			got = wire.AppendAcquired(nil, push, tok)
		case "ERROR":
			e, err := wire.DecodeError(payload)
			if err != nil || int(e.Code) != int(f.Fields["code"].(float64)) || e.Msg != f.Fields["message"] ||
				e.Code.String() != f.Fields["code_name"] {
				t.Errorf("%s: decoded %v err %v, want %v", f.What, e, err, f.Fields)
				continue
			}
			got = wire.AppendError(nil, e.Code, e.Msg)
		default:
			t.Errorf("%s: unknown type %q", f.What, f.Type)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoded % x, want % x", f.What, got, want)
		}
	}
	for _, r := range v.RefusedHeaders {
		if _, err := wire.ParseHeader(unhex(t, r.Hex)); err == nil {
			t.Errorf("%s: ParseHeader accepted it", r.What)
		}
	}
	for _, b := range v.BadFrames {
		if !b.First {
			continue // a frame after a valid ACQUIRE: only a server can judge it
		}
		h, payload, _, err := wire.Split(unhex(t, b.Hex))
		if err == nil && h.Type == wire.TypeAcquire {
			_, err = wire.DecodeAcquire(payload)
		}
		var we *wire.Error
		if h.Type == wire.TypeAcquire && (!errors.As(err, &we) || we.Code.String() != b.Error) {
			t.Errorf("%s: DecodeAcquire: %v, want %s", b.What, err, b.Error)
		}
	}
	for _, b := range v.BadAcquire {
		name, owner := b.Name, b.Owner
		if b.NameHex != "" {
			name = string(unhex(t, b.NameHex))
		}
		if b.OwnerHex != "" {
			owner = string(unhex(t, b.OwnerHex))
		}
		if b.Limit > wire.MaxLimit {
			continue // a u16 cannot hold it: a client refuses it before it makes the field
		}
		a := wire.Acquire{Version: version, LeaseMs: b.LeaseMs, Name: name, Owner: owner}
		if version == wire.Version2 {
			a.Limit = uint16(b.Limit)
			if b.Shared {
				a.Flags |= wire.FlagShared
			}
		}
		_, err := wire.AppendAcquire(nil, a)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code.String() != b.Error {
			t.Errorf("%s: AppendAcquire: %v, want %s", b.What, err, b.Error)
		}
		if b.Hex != "" {
			_, payload, _, _ := wire.Split(unhex(t, b.Hex))
			if _, err := wire.DecodeAcquire(payload); !errors.As(err, &we) || we.Code.String() != b.Error {
				t.Errorf("%s: DecodeAcquire: %v, want %s", b.What, err, b.Error)
			}
		}
	}
	classes := map[wire.Class]string{wire.ClassServer: "server", wire.ClassSession: "session", wire.ClassClient: "client"}
	for _, c := range v.ErrorCodes {
		code := wire.Code(c.Code)
		if code.String() != c.Name || classes[code.Class()] != c.Class {
			t.Errorf("code 0x%02x: %s %v, want %s %s", c.Code, code, code.Class(), c.Name, c.Class)
		}
	}
}
