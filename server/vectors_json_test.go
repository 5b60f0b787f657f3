package server_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
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

// TestVectorsFileVersion2 plays what the shared vectors file says of
// protocol version 2 against the server: its refusals, and its
// conversations (semaphore, limit mismatch, read/write lock, a version 1
// claim among shared ones, a waiter leaving the head), with the idle
// poller's shards serving parked sessions and with reader goroutines.
func TestVectorsFileVersion2(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../clients/go/wire/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		V2 struct {
			BadFrames []struct {
				What, Hex, Error string
				First            bool
			} `json:"bad_frames"`
			BadAcquire []struct {
				What, Hex, Error string
			} `json:"bad_acquire"`
			Scenarios []struct {
				What  string
				Steps []struct {
					Conn         int
					Send         string
					Expect       string
					ExpectError  string `json:"expect_error"`
					ExpectClosed bool   `json:"expect_closed"`
					Close        bool
				}
			}
		} `json:"version_2"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.V2.Scenarios) == 0 || len(v.V2.BadFrames) == 0 {
		t.Fatal("no version_2 scenarios or bad frames in the vectors file")
	}
	codes := map[string]wire.Code{}
	for c := range wire.Code(0x30) {
		codes[c.String()] = c
	}
	for _, park := range []bool{true, false} {
		t.Run(fmt.Sprintf("park=%v", park), func(t *testing.T) {
			t.Parallel()
			ts := batontest.StartServer(t, func(c *server.Config) { c.ParkIdle = park })
			for _, f := range v.V2.BadFrames {
				raw, err := hex.DecodeString(f.Hex)
				if err != nil {
					t.Fatalf("%s: %v", f.What, err)
				}
				conn := batontest.Dial(t, ts.Addr)
				if !f.First {
					conn.Acquire("v2/bad/"+f.What, longLease, false, "")
					expectAcquired(t, conn)
				}
				conn.Write(raw)
				expectError(t, conn, codes[f.Error])
			}
			for _, a := range v.V2.BadAcquire {
				if a.Hex == "" {
					continue
				}
				raw, _ := hex.DecodeString(a.Hex)
				conn := batontest.Dial(t, ts.Addr)
				conn.Write(raw)
				expectError(t, conn, codes[a.Error])
			}
			for _, sc := range v.V2.Scenarios {
				conns := map[int]*batontest.Conn{}
				for i, st := range sc.Steps {
					where := fmt.Sprintf("%s, step %d (conn %d)", sc.What, i, st.Conn)
					c := conns[st.Conn]
					if c == nil {
						c = batontest.Dial(t, ts.Addr)
						conns[st.Conn] = c
					}
					switch {
					case st.Send != "":
						raw, err := hex.DecodeString(st.Send)
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						c.Write(raw)
					case st.Expect != "":
						f, err := c.TryReadFrame(frameWait)
						got := hex.EncodeToString(rawFrame(f))
						if err != nil || !hexMatch(got, st.Expect) {
							t.Fatalf("%s: got %s (%v), want %s", where, got, err, st.Expect)
						}
					case st.ExpectError != "":
						f, err := c.TryReadFrame(frameWait)
						if err != nil || f.Type != wire.TypeError || f.Err.Code.String() != st.ExpectError {
							t.Fatalf("%s: got %v (%v), want ERROR %s", where, f, err, st.ExpectError)
						}
					case st.ExpectClosed:
						c.ExpectClosed(frameWait)
					case st.Close:
						c.Conn.Close()
					default:
						t.Fatalf("%s: a step that does nothing", where)
					}
				}
				for _, c := range conns {
					c.Conn.Close()
				}
			}
		})
	}
}

// hexMatch reports whether hex text got matches pattern, where '.' in the
// pattern stands for any digit.
func hexMatch(got, pattern string) bool {
	if len(got) != len(pattern) {
		return false
	}
	for i := range got {
		if pattern[i] != '.' && pattern[i] != got[i] {
			return false
		}
	}
	return true
}
