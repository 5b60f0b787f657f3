package server_test

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestVectorsFileRefusals plays each refusal of the shared vectors file
// (clients/go/wire/testdata/vectors.json) against the server: a bad frame, first or
// after a valid ACQUIRE, and each bad ACQUIRE that fits a frame, gets
// ERROR with the code the file names.
func TestVectorsFileRefusals(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../clients/go/wire/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		BadFrames []struct {
			What, Hex, Error string
			First            bool
		} `json:"bad_frames"`
		BadAcquire []struct {
			What, Hex, Error string
		} `json:"bad_acquire"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	ts := batontest.StartServer(t)
	codes := map[string]wire.Code{}
	for c := range wire.Code(0x30) {
		codes[c.String()] = c
	}
	type refusal struct{ what, hex, code string }
	var cases []refusal
	for _, f := range v.BadFrames {
		if !f.First {
			continue
		}
		cases = append(cases, refusal{f.What, f.Hex, f.Error})
	}
	for _, a := range v.BadAcquire {
		if a.Hex != "" {
			cases = append(cases, refusal{a.What, a.Hex, a.Error})
		}
	}
	for _, c := range cases {
		raw, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		conn := batontest.Dial(t, ts.Addr)
		conn.Write(raw)
		expectError(t, conn, codes[c.code])
	}
	// After a valid ACQUIRE.
	for i, f := range v.BadFrames {
		if f.First {
			continue
		}
		conn, _ := hold(t, ts, "vectors-"+string(rune('a'+i)), 10*time.Second)
		raw, _ := hex.DecodeString(f.Hex)
		conn.Write(raw)
		expectError(t, conn, codes[f.Error])
	}
}
