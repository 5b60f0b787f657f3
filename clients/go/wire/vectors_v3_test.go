package wire_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
)

// version3Vectors is the version_3 section of testdata/vectors.json.
// Until the codec speaks version 3, TestVersion3VectorsFollowTheSpec reads
// it with the layout of docs/protocol.md section 14 written out here, so
// that the file is checked by a second reading of the spec, independent
// of whatever produced it.
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
		What   string         `json:"what"`
		Hex    string         `json:"hex"`
		Error  string         `json:"error"`
		Resume map[string]any `json:"resume"`
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
			Conn        int              `json:"conn"`
			Send        string           `json:"send"`
			Expect      string           `json:"expect"`
			Save        map[string][]int `json:"save"`
			ExpectError string           `json:"expect_error"`
		} `json:"steps"`
	} `json:"scenarios"`
}

// The version 3 layout (docs/protocol.md section 14).
const (
	v3FlagNoWait, v3FlagShared, v3FlagResume, v3FlagHeld = 0x01, 0x02, 0x04, 0x08
	v3Fixed, v3ResumeBlock, v3CredentialSize             = 9, 30, 16
	v3AcquiredCredential, v3WaitingTicket                = 0x02, 0x01
)

// v3Acquire is a version 3 ACQUIRE payload as the spec lays it out.
type v3Acquire struct {
	flags         uint8
	lease         uint32
	limit         uint16
	resumeID      uint64
	generation    uint32
	attempt       uint16
	credential    []byte
	name, owner   string
	refusal, fail string // the code a server answers, if any
}

// parseV3Acquire reads p by the spec's table, and names the code of the
// first check that refuses it (the checks a decoder makes; the credential
// and the claim's state are the server's).
func parseV3Acquire(p []byte) v3Acquire {
	var a v3Acquire
	if len(p) == 0 || p[0] != 3 {
		a.refusal = "VERSION"
		return a
	}
	if len(p) < v3Fixed {
		a.refusal = "PROTOCOL"
		return a
	}
	a.flags, a.lease, a.limit = p[1], binary.BigEndian.Uint32(p[2:6]), binary.BigEndian.Uint16(p[6:8])
	fixed := v3Fixed
	if a.flags&v3FlagResume != 0 {
		fixed += v3ResumeBlock
		if len(p) < fixed {
			a.refusal = "PROTOCOL"
			return a
		}
		a.resumeID = binary.BigEndian.Uint64(p[8:16])
		a.generation = binary.BigEndian.Uint32(p[16:20])
		a.attempt = binary.BigEndian.Uint16(p[20:22])
		a.credential = p[22:38]
	}
	nameLen := int(p[fixed-1])
	if len(p) < fixed+nameLen {
		a.refusal = "PROTOCOL"
		return a
	}
	a.name, a.owner = string(p[fixed:fixed+nameLen]), string(p[fixed+nameLen:])
	resume, held := a.flags&v3FlagResume != 0, a.flags&v3FlagHeld != 0
	switch {
	case a.flags&0xF0 != 0, held && !resume, resume && a.flags&v3FlagNoWait != 0,
		resume && (a.resumeID == 0 || a.generation == 0 || a.attempt == 0),
		a.lease == 0, a.limit == 0, a.limit > 1 && a.flags&v3FlagShared == 0:
		a.refusal = "BAD_REQUEST"
	case wire.CheckName(a.name) != nil, wire.CheckOwner(a.owner) != nil:
		a.refusal = "BAD_REQUEST"
	}
	return a
}

// v3Credential computes a credential as the spec says, and the message.
func v3Credential(key []byte, clusterID string, role byte, gen uint32, name string, shared bool, limit uint16, lease uint32, id uint64, clientKey []byte) (cred, msg []byte) {
	msg = append(msg, "baton v3 claim"...)
	msg = append(msg, role, byte(len(clusterID)))
	msg = append(msg, clusterID...)
	msg = binary.BigEndian.AppendUint32(msg, gen)
	s := byte(0)
	if shared {
		s = 1
	}
	msg = append(msg, s)
	msg = binary.BigEndian.AppendUint16(msg, limit)
	msg = binary.BigEndian.AppendUint32(msg, lease)
	msg = binary.BigEndian.AppendUint64(msg, id)
	msg = append(msg, byte(len(clientKey)))
	msg = append(msg, clientKey...)
	msg = append(msg, byte(len(name)))
	msg = append(msg, name...)
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)[:v3CredentialSize], msg
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
	if len(v.V3.Frames) < 10 || len(v.V3.BadFrames) == 0 || len(v.V3.Credentials) < 3 || len(v.V3.Scenarios) == 0 {
		t.Fatalf("version_3: %d frames, %d bad frames, %d credentials, %d scenarios: want the vectors of docs/protocol.md section 14",
			len(v.V3.Frames), len(v.V3.BadFrames), len(v.V3.Credentials), len(v.V3.Scenarios))
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

// TestVersion3VectorsFollowTheSpec reads every frame of the version_3
// section by the layout of docs/protocol.md section 14 and checks it
// against its fields; each credential against HMAC-SHA256 over the
// message the spec defines; each refusal against the spec's checks; and
// each scenario's frames for lengths that agree with their payloads once
// the saved values are put in.
func TestVersion3VectorsFollowTheSpec(t *testing.T) {
	v := loadVersion3(t)
	for _, f := range v.Frames {
		b := unhex(t, f.Hex)
		h, p, n, err := wire.Split(b)
		if err != nil || n != len(b) {
			t.Errorf("%s: Split: n %d of %d, err %v: want one whole frame", f.What, n, len(b), err)
			continue
		}
		switch f.Type {
		case "ACQUIRE":
			a := parseV3Acquire(p)
			if h.Type != wire.TypeAcquire || a.refusal != "" {
				t.Errorf("%s: refused with %s", f.What, a.refusal)
				continue
			}
			got := map[string]any{
				"version": float64(3), "nowait": a.flags&v3FlagNoWait != 0, "shared": a.flags&v3FlagShared != 0,
				"lease_ms": float64(a.lease), "limit": float64(a.limit), "name": a.name, "owner": a.owner,
			}
			for k, want := range got {
				if f.Fields[k] != want {
					t.Errorf("%s: %s = %v, want %v", f.What, k, want, f.Fields[k])
				}
			}
			r, _ := f.Fields["resume"].(map[string]any)
			if (r != nil) != (a.flags&v3FlagResume != 0) {
				t.Errorf("%s: resume fields %v with flags 0x%02x", f.What, r, a.flags)
				continue
			}
			if r != nil && (decimal(t, f.What, r["id"]) != a.resumeID || r["credential"] != hex.EncodeToString(a.credential) ||
				r["held"] != (a.flags&v3FlagHeld != 0) || r["generation"] != float64(a.generation) || r["attempt"] != float64(a.attempt)) {
				t.Errorf("%s: resume block id %d credential %x held %v, want %v", f.What, a.resumeID, a.credential, a.flags&v3FlagHeld != 0, r)
			}
		case "ACQUIRED":
			withCred := len(p) == 29 && p[0]&v3AcquiredCredential != 0
			if h.Type != wire.TypeAcquired || !(withCred || len(p) == 9 && p[0]&v3AcquiredCredential == 0) {
				t.Errorf("%s: ACQUIRED payload of %d bytes, flags 0x%02x: want 29 with CREDENTIAL or 9 without", f.What, len(p), p[0])
				continue
			}
			cred, gen := "", uint32(0)
			if withCred {
				gen, cred = binary.BigEndian.Uint32(p[9:13]), hex.EncodeToString(p[13:29])
			}
			tok := binary.BigEndian.Uint64(p[1:9])
			if tok == 0 || tok != decimal(t, f.What, f.Fields["token"]) || (p[0]&wire.FlagPush != 0) != f.Fields["push"] ||
				cred != f.Fields["credential"] || float64(gen) != f.Fields["generation"] {
				t.Errorf("%s: token %d push %v credential %q, want %v", f.What, tok, p[0]&wire.FlagPush != 0, cred, f.Fields)
			}
		case "WAITING":
			withTicket := len(p) == 33 && p[0]&v3WaitingTicket != 0
			if h.Type != wire.TypeWaiting || !(withTicket || len(p) == 5 && p[0] == 0) {
				t.Errorf("%s: WAITING payload of %d bytes, flags 0x%02x: want 33 with TICKET or 5 without", f.What, len(p), p[0])
				continue
			}
			ticket, gen, cred := uint64(0), uint32(0), ""
			if withTicket {
				ticket, gen, cred = binary.BigEndian.Uint64(p[5:13]), binary.BigEndian.Uint32(p[13:17]), hex.EncodeToString(p[17:33])
			}
			pos := binary.BigEndian.Uint32(p[1:5])
			if float64(pos) != f.Fields["position"] || ticket != decimal(t, f.What, f.Fields["ticket"]) || cred != f.Fields["credential"] ||
				float64(gen) != f.Fields["generation"] {
				t.Errorf("%s: position %d ticket %d credential %q, want %v", f.What, pos, ticket, cred, f.Fields)
			}
		case "ERROR":
			e, err := wire.DecodeError(p)
			if err != nil || float64(e.Code) != f.Fields["code"] || e.Msg != f.Fields["message"] {
				t.Errorf("%s: %v %v, want %v", f.What, e, err, f.Fields)
			}
		default:
			t.Errorf("%s: unknown type %q", f.What, f.Type)
		}
	}

	for _, bf := range v.BadFrames {
		_, p, _, err := wire.Split(unhex(t, bf.Hex))
		if err != nil {
			t.Errorf("%s: %v", bf.What, err)
			continue
		}
		a := parseV3Acquire(p)
		want := bf.Error
		if !bf.First {
			want = "" // well formed: refused only for coming second
		}
		if a.refusal != want {
			t.Errorf("%s: the spec's checks answer %q, the file says %q (first %v)", bf.What, a.refusal, bf.Error, bf.First)
		}
	}
	for _, ba := range v.BadAcquire {
		_, p, _, err := wire.Split(unhex(t, ba.Hex))
		if a := parseV3Acquire(p); err != nil || a.refusal != ba.Error {
			t.Errorf("%s: the spec's checks answer %q (%v), the file says %q", ba.What, a.refusal, err, ba.Error)
		}
	}

	classes := map[string]wire.Class{"server": wire.ClassServer, "session": wire.ClassSession, "client": wire.ClassClient}
	for _, c := range v.ErrorCodes {
		if wire.Code(c.Code).Class() != classes[c.Class] {
			t.Errorf("code 0x%02x %s: its range gives class %v, the file says %s", c.Code, c.Name, wire.Code(c.Code).Class(), c.Class)
		}
	}

	for _, c := range v.Credentials {
		if len(c.Role) != 1 || (c.Role != "H" && c.Role != "W") {
			t.Errorf("%s: role %q, want H or W", c.What, c.Role)
			continue
		}
		clientKey := unhex(t, c.ClientKey)
		if c.ClientSPKI != "" {
			if sum := sha256.Sum256(unhex(t, c.ClientSPKI)); !bytes.Equal(sum[:], clientKey) {
				t.Errorf("%s: client_key %x is not SHA-256 of client_spki (%x)", c.What, clientKey, sum)
			}
		}
		cred, msg := v3Credential(unhex(t, c.Key), c.ClusterID, c.Role[0], c.Generation, c.Name, c.Shared, c.Limit, c.LeaseMs, decimal(t, c.What, c.ID), clientKey)
		if hex.EncodeToString(msg) != c.Message {
			t.Errorf("%s: message %x, the file says %s", c.What, msg, c.Message)
		}
		if hex.EncodeToString(cred) != c.Credential {
			t.Errorf("%s: credential %x, the file says %s", c.What, cred, c.Credential)
		}
	}
	// The frames' credentials are the first two vectors'.
	if !strings.Contains(v.Frames[2].Hex, v.Credentials[0].Credential) || !strings.Contains(v.Frames[3].Hex, v.Credentials[1].Credential) {
		t.Errorf("the resume frames do not carry the credentials of the first two credential vectors")
	}

	placeholder := regexp.MustCompile(`\{([a-z0-9_]+)\}`)
	for _, s := range v.Scenarios {
		sizes := map[string]int{}
		for i, st := range s.Steps {
			for _, frame := range []string{st.Send, st.Expect} {
				if frame == "" {
					continue
				}
				filled := placeholder.ReplaceAllStringFunc(frame, func(m string) string {
					n, ok := sizes[m[1:len(m)-1]]
					if !ok {
						t.Errorf("%s, step %d: %s used before it is saved", s.What, i, m)
					}
					return strings.Repeat("00", n)
				})
				filled = strings.ReplaceAll(filled, ".", "0")
				b, err := hex.DecodeString(filled)
				if err != nil || len(b) < wire.HeaderSize || int(binary.BigEndian.Uint16(b[1:3])) != len(b)-wire.HeaderSize {
					t.Errorf("%s, step %d: frame %s: length does not match its payload (%v)", s.What, i, frame, err)
					continue
				}
				if frame == st.Expect {
					for name, span := range st.Save {
						if len(span) != 2 || span[0] < 0 || span[1] <= 0 || span[0]+span[1] > len(b) {
							t.Errorf("%s, step %d: save %s %v outside the expected frame", s.What, i, name, span)
						}
					}
				}
				if frame == st.Send && b[0] == byte(wire.TypeAcquire) && b[3] == 3 {
					if a := parseV3Acquire(b[3:]); a.refusal != "" && !bytes.Contains([]byte(frame), []byte("{")) {
						t.Errorf("%s, step %d: ACQUIRE refused by the spec's checks: %s", s.What, i, a.refusal)
					}
				}
			}
			for name, span := range st.Save {
				if len(span) == 2 {
					sizes[name] = span[1]
				}
			}
		}
	}
}
