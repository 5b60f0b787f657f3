package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

// version3Vectors is the version_3 section of testdata/vectors.json
// (docs/protocol.md, section 14).
type version3Vectors struct {
	Frames []struct {
		What   string         `json:"what"`
		Hex    string         `json:"hex"`
		Type   string         `json:"type"`
		Fields map[string]any `json:"fields"`
	} `json:"frames"`
	BadFrames []struct {
		What  string `json:"what"`
		Hex   string `json:"hex"`
		Error string `json:"error"`
		First bool   `json:"first"`
	} `json:"bad_frames"`
	BadAcquire []struct {
		What    string         `json:"what"`
		Name    string         `json:"name"`
		LeaseMs uint32         `json:"lease_ms"`
		Owner   string         `json:"owner"`
		Shared  bool           `json:"shared"`
		Limit   uint16         `json:"limit"`
		NoWait  bool           `json:"nowait"`
		Resume  map[string]any `json:"resume"`
		Error   string         `json:"error"`
		Hex     string         `json:"hex"`
	} `json:"bad_acquire"`
	ErrorCodes []struct {
		Code  int    `json:"code"`
		Name  string `json:"name"`
		Class string `json:"class"`
	} `json:"error_codes"`
	Credentials []struct {
		What       string `json:"what"`
		Key        string `json:"key"`
		ClusterID  string `json:"cluster_id"`
		Role       string `json:"role"`
		Generation uint32 `json:"generation"`
		Name       string `json:"name"`
		Shared     bool   `json:"shared"`
		Limit      uint16 `json:"limit"`
		LeaseMs    uint32 `json:"lease_ms"`
		ID         string `json:"id"`
		ClientSPKI string `json:"client_spki"`
		ClientKey  string `json:"client_key"`
		Message    string `json:"message"`
		Credential string `json:"credential"`
	} `json:"credentials"`
	Scenarios []struct {
		What  string `json:"what"`
		Steps []struct {
			Conn          *int             `json:"conn"`
			Send          string           `json:"send"`
			Expect        string           `json:"expect"`
			Save          map[string][]int `json:"save"`
			ExpectError   string           `json:"expect_error"`
			ExpectClosed  bool             `json:"expect_closed"`
			Close         bool             `json:"close"`
			NewGeneration bool             `json:"new_generation"`
		} `json:"steps"`
	} `json:"scenarios"`
}

func loadVersion3(t *testing.T) version3Vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		V3 version3Vectors `json:"version_3"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("testdata/vectors.json: %v", err)
	}
	if len(v.V3.Frames) < 15 || len(v.V3.BadFrames) < 15 || len(v.V3.BadAcquire) < 5 || len(v.V3.Credentials) < 8 || len(v.V3.Scenarios) < 10 {
		t.Fatalf("version_3: %d frames, %d bad frames, %d bad acquires, %d credentials, %d scenarios: want the vectors of docs/protocol.md section 14",
			len(v.V3.Frames), len(v.V3.BadFrames), len(v.V3.BadAcquire), len(v.V3.Credentials), len(v.V3.Scenarios))
	}
	return v.V3
}

func decimal(t *testing.T, what string, v any) uint64 {
	t.Helper()
	s, _ := v.(string)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a decimal u64", what, s)
	}
	return n
}

func number(v any) uint64 {
	f, _ := v.(float64)
	return uint64(f)
}

func credentialOf(t *testing.T, what, h string) wire.Credential {
	t.Helper()
	var c wire.Credential
	if b := unhex(t, h); len(b) != len(c) {
		t.Fatalf("%s: credential of %d bytes", what, len(b))
	} else {
		copy(c[:], b)
	}
	return c
}

// resumeOf is the Resume a vector's "resume" object describes, and whether
// it says HELD.
func resumeOf(t *testing.T, what string, r map[string]any) (wire.Resume, bool) {
	t.Helper()
	res := wire.Resume{
		ID:         decimal(t, what, r["id"]),
		Generation: uint32(number(r["generation"])),
		Attempt:    uint16(number(r["attempt"])),
		Credential: credentialOf(t, what, r["credential"].(string)),
	}
	held, _ := r["held"].(bool)
	return res, held
}

func codeName(err error) string {
	var we *wire.Error
	if !errors.As(err, &we) {
		return ""
	}
	return we.Code.String()
}

// TestVersion3Vectors decodes every frame of the version_3 section with
// the codec, to its fields, and encodes the fields back to the same bytes;
// checks each refusal, credential and error code; and decodes every frame
// of every conversation, once its saved values are filled in.
func TestVersion3Vectors(t *testing.T) {
	v := loadVersion3(t)
	for _, f := range v.Frames {
		want := unhex(t, f.Hex)
		h, p, n, err := wire.Split(want)
		if err != nil || n != len(want) {
			t.Errorf("%s: Split: n %d of %d, err %v: want one whole frame", f.What, n, len(want), err)
			continue
		}
		var got []byte
		switch f.Type {
		case "ACQUIRE":
			a, err := wire.DecodeAcquireUpTo(p, wire.Version3)
			if err != nil || h.Type != wire.TypeAcquire {
				t.Errorf("%s: DecodeAcquireUpTo: %v (type %v)", f.What, err, h.Type)
				continue
			}
			if a.Version != 3 || a.NoWait() != f.Fields["nowait"] || a.Shared() != f.Fields["shared"] ||
				uint64(a.LeaseMs) != number(f.Fields["lease_ms"]) || uint64(a.Limit) != number(f.Fields["limit"]) ||
				a.Name != f.Fields["name"] || a.Owner != f.Fields["owner"] {
				t.Errorf("%s: decoded %+v, want %v", f.What, a, f.Fields)
			}
			r, _ := f.Fields["resume"].(map[string]any)
			if (r != nil) != a.Resuming() {
				t.Errorf("%s: resume fields %v, Resuming() %v", f.What, r, a.Resuming())
			}
			if r != nil {
				res, held := resumeOf(t, f.What, r)
				if a.Resume != res || a.Held() != held {
					t.Errorf("%s: resume %+v held %v, want %+v held %v", f.What, a.Resume, a.Held(), res, held)
				}
			}
			// A server of versions 1 and 2 refuses it by its version.
			if _, err := wire.DecodeAcquire(p); codeName(err) != "VERSION" {
				t.Errorf("%s: DecodeAcquire: %v, want VERSION", f.What, err)
			}
			if got, err = wire.AppendAcquire(nil, a); err != nil {
				t.Errorf("%s: AppendAcquire: %v", f.What, err)
			}
		case "ACQUIRED":
			a, err := wire.DecodeAcquiredV3(p)
			cred, _ := f.Fields["credential"].(string)
			if err != nil || h.Type != wire.TypeAcquired || a.Push != f.Fields["push"] || a.Token != decimal(t, f.What, f.Fields["token"]) ||
				a.WithCredential != (cred != "") || uint64(a.Generation) != number(f.Fields["generation"]) {
				t.Errorf("%s: DecodeAcquiredV3: %+v, %v, want %v", f.What, a, err, f.Fields)
				continue
			}
			if cred != "" && a.Credential != credentialOf(t, f.What, cred) {
				t.Errorf("%s: the credential differs from %s", f.What, cred)
			}
			// The version 1 decoder takes the 9-byte form, and only it.
			if _, _, err := wire.DecodeAcquired(p); (err == nil) == a.WithCredential {
				t.Errorf("%s: DecodeAcquired: %v with a credential %v", f.What, err, a.WithCredential)
			}
			got = wire.AppendAcquiredV3(nil, a)
		case "WAITING":
			w, err := wire.DecodeWaitingV3(p)
			cred, _ := f.Fields["credential"].(string)
			if err != nil || h.Type != wire.TypeWaiting || uint64(w.Position) != number(f.Fields["position"]) ||
				w.Ticket != decimal(t, f.What, f.Fields["ticket"]) || w.WithTicket != (cred != "") || uint64(w.Generation) != number(f.Fields["generation"]) {
				t.Errorf("%s: DecodeWaitingV3: %+v, %v, want %v", f.What, w, err, f.Fields)
				continue
			}
			if cred != "" && w.Credential != credentialOf(t, f.What, cred) {
				t.Errorf("%s: the credential differs from %s", f.What, cred)
			}
			if _, err := wire.DecodeWaiting(p); (err == nil) == w.WithTicket {
				t.Errorf("%s: DecodeWaiting: %v with a ticket %v", f.What, err, w.WithTicket)
			}
			got = wire.AppendWaitingV3(nil, w)
		case "ERROR":
			e, err := wire.DecodeError(p)
			if err != nil || uint64(e.Code) != number(f.Fields["code"]) || e.Code.String() != f.Fields["code_name"] || e.Msg != f.Fields["message"] {
				t.Errorf("%s: DecodeError: %v %v, want %v", f.What, e, err, f.Fields)
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

	for _, bf := range v.BadFrames {
		h, p, _, err := wire.Split(unhex(t, bf.Hex))
		if err != nil || h.Type != wire.TypeAcquire {
			t.Errorf("%s: Split: %v %v", bf.What, h.Type, err)
			continue
		}
		_, err = wire.DecodeAcquireUpTo(p, wire.Version3)
		switch {
		case bf.First && codeName(err) != bf.Error:
			t.Errorf("%s: DecodeAcquireUpTo: %v, want %s", bf.What, err, bf.Error)
		case !bf.First && err != nil: // well formed: refused only for coming second
			t.Errorf("%s: DecodeAcquireUpTo: %v, want a valid ACQUIRE", bf.What, err)
		}
	}
	for _, ba := range v.BadAcquire {
		a := wire.Acquire{Version: 3, LeaseMs: ba.LeaseMs, Limit: ba.Limit, Name: ba.Name, Owner: ba.Owner}
		if ba.Shared {
			a.Flags |= wire.FlagShared
		}
		if ba.NoWait {
			a.Flags |= wire.FlagNoWait
		}
		if ba.Resume != nil {
			var held bool
			a.Resume, held = resumeOf(t, ba.What, ba.Resume)
			a.Flags |= wire.FlagResume
			if held {
				a.Flags |= wire.FlagHeld
			}
		}
		if _, err := wire.AppendAcquire(nil, a); codeName(err) != ba.Error {
			t.Errorf("%s: AppendAcquire: %v, want %s", ba.What, err, ba.Error)
		}
		if ba.Hex != "" {
			_, p, _, _ := wire.Split(unhex(t, ba.Hex))
			if _, err := wire.DecodeAcquireUpTo(p, wire.Version3); codeName(err) != ba.Error {
				t.Errorf("%s: DecodeAcquireUpTo: %v, want %s", ba.What, err, ba.Error)
			}
		}
	}

	classes := map[string]wire.Class{"server": wire.ClassServer, "session": wire.ClassSession, "client": wire.ClassClient}
	for _, c := range v.ErrorCodes {
		if code := wire.Code(c.Code); code.String() != c.Name || code.Class() != classes[c.Class] {
			t.Errorf("code 0x%02x: %s %v, want %s %s", c.Code, code, code.Class(), c.Name, c.Class)
		}
	}

	for _, c := range v.Credentials {
		if len(c.Role) != 1 {
			t.Errorf("%s: role %q", c.What, c.Role)
			continue
		}
		claim := wire.Claim{Role: wire.Role(c.Role[0]), ClusterID: c.ClusterID, Generation: c.Generation, Shared: c.Shared,
			Limit: c.Limit, LeaseMs: c.LeaseMs, ID: decimal(t, c.What, c.ID), ClientKey: unhex(t, c.ClientKey), Name: c.Name}
		if c.ClientSPKI != "" {
			if sum := wire.ClientKeyHash(unhex(t, c.ClientSPKI)); !bytes.Equal(sum[:], claim.ClientKey) {
				t.Errorf("%s: ClientKeyHash(client_spki) %x, the file says %s", c.What, sum, c.ClientKey)
			}
		}
		if msg := wire.AppendCredentialMessage(nil, claim); hex.EncodeToString(msg) != c.Message {
			t.Errorf("%s: message %x, the file says %s", c.What, msg, c.Message)
		}
		m, err := wire.NewMinter(unhex(t, c.Key))
		if err != nil {
			t.Fatalf("%s: %v", c.What, err)
		}
		want := credentialOf(t, c.What, c.Credential)
		if got := m.Credential(claim); got != want || !m.Verify(claim, want) {
			t.Errorf("%s: credential % x, the file says %s", c.What, got[:], c.Credential)
		}
		bad := want
		bad[15] ^= 1
		if m.Verify(claim, bad) {
			t.Errorf("%s: a credential with one bit changed verifies", c.What)
		}
	}
	// The frames carry the credentials of the vectors they name.
	for i, ci := range map[int]int{2: 0, 3: 1, 5: 0, 8: 4, 9: 1} {
		if !strings.Contains(v.Frames[i].Hex, v.Credentials[ci].Credential) {
			t.Errorf("frame %q does not carry the credential of %q", v.Frames[i].What, v.Credentials[ci].What)
		}
	}

	checkScenarios(t, v)
}

// checkScenarios decodes every frame of every conversation, with each
// saved value (and each '.') filled in with non-zero bytes of the saved
// size: what a client sends is a valid ACQUIRE or HEARTBEAT, and what it
// expects a valid frame of its session's version; every save lies inside
// the frame it reads, and every value is saved before it is used.
func checkScenarios(t *testing.T, v version3Vectors) {
	placeholder := regexp.MustCompile(`\{([a-z0-9_]+)\}`)
	for _, s := range v.Scenarios {
		sizes := map[string]int{}
		generations := 0
		for i, st := range s.Steps {
			where := s.What + ", step " + strconv.Itoa(i)
			actions := 0
			for _, set := range []bool{st.Send != "", st.Expect != "", st.ExpectError != "", st.ExpectClosed, st.Close, st.NewGeneration} {
				if set {
					actions++
				}
			}
			if actions != 1 || (st.Conn == nil) != st.NewGeneration || len(st.Save) > 0 && st.Expect == "" {
				t.Errorf("%s: a step must do one thing, on a connection unless it is new_generation", where)
				continue
			}
			if st.NewGeneration {
				generations++
				continue
			}
			for _, frame := range []string{st.Send, st.Expect} {
				if frame == "" {
					continue
				}
				filled := placeholder.ReplaceAllStringFunc(frame, func(m string) string {
					n, ok := sizes[m[1:len(m)-1]]
					if !ok {
						t.Errorf("%s: %s used before it is saved", where, m)
					}
					return strings.Repeat("01", n)
				})
				b := unhex(t, strings.ReplaceAll(filled, ".", "1"))
				h, p, n, err := wire.Split(b)
				if err != nil || n != len(b) {
					t.Errorf("%s: frame %s: Split n %d of %d, %v", where, frame, n, len(b), err)
					continue
				}
				switch {
				case frame == st.Send && h.Type == wire.TypeAcquire:
					_, err = wire.DecodeAcquireUpTo(p, wire.Version3)
				case frame == st.Send && h.Type == wire.TypeHeartbeat:
					err = wire.CheckHeartbeat(p)
				case frame == st.Expect && h.Type == wire.TypeAcquired:
					_, err = wire.DecodeAcquiredV3(p)
				case frame == st.Expect && h.Type == wire.TypeWaiting:
					_, err = wire.DecodeWaitingV3(p)
				default:
					t.Errorf("%s: frame %s of type %v", where, frame, h.Type)
				}
				if err != nil {
					t.Errorf("%s: frame %s: %v", where, frame, err)
				}
				if frame == st.Expect {
					for name, span := range st.Save {
						if len(span) != 2 || span[0] < wire.HeaderSize || span[1] <= 0 || span[0]+span[1] > len(b) {
							t.Errorf("%s: save %s %v outside the payload of the frame read", where, name, span)
						}
					}
				}
			}
			for name, span := range st.Save {
				if len(span) == 2 {
					sizes[name] = span[1]
				}
			}
		}
		if strings.Contains(s.What, "generation") && generations == 0 {
			t.Errorf("%s: no new_generation step", s.What)
		}
	}
}
