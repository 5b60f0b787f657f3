package server_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestVectorsFileVersion3 plays what the shared vectors file says of
// protocol version 3 against the real server over TCP: its refusals, and
// every conversation (a move on the same server, a waiter keeping its
// place, refused, forged and rebound credentials, an old generation,
// attempt numbers, a promoted waiter resuming by its ticket, claims of
// versions 1, 2 and 3 on one name, the fresh credential after a new
// generation), with the idle poller's shards and with reader goroutines.
// Tokens, tickets, generations and credentials are the server's own: a
// step saves them from a frame it reads and sends them back later; the
// new_generation step goes through the server's own rotation.
func TestVectorsFileVersion3(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../clients/go/wire/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		V3 struct {
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
					Conn          int
					Send          string
					Expect        string
					ExpectError   string `json:"expect_error"`
					ExpectClosed  bool   `json:"expect_closed"`
					Close         bool
					NewGeneration bool             `json:"new_generation"`
					Save          map[string][]int `json:"save"`
				}
			}
		} `json:"version_3"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.V3.Scenarios) < 10 || len(v.V3.BadFrames) == 0 {
		t.Fatalf("%d version_3 scenarios and %d bad frames in the vectors file, want every one", len(v.V3.Scenarios), len(v.V3.BadFrames))
	}
	codes := map[string]wire.Code{}
	for c := range wire.Code(0x30) {
		codes[c.String()] = c
	}
	placeholder := regexp.MustCompile(`\{([a-z0-9_]+)\}`)
	for _, park := range []bool{true, false} {
		t.Run(fmt.Sprintf("park=%v", park), func(t *testing.T) {
			t.Parallel()
			ts := batontest.StartServer(t, func(c *server.Config) { c.ParkIdle = park })
			for _, f := range v.V3.BadFrames {
				raw, err := hex.DecodeString(f.Hex)
				if err != nil {
					t.Fatalf("%s: %v", f.What, err)
				}
				conn := batontest.Dial(t, ts.Addr)
				if !f.First {
					conn.AcquireV3("v3/bad/"+f.What, longLease, false, 1, false, "")
					expectAcquired(t, conn)
				}
				conn.Write(raw)
				expectError(t, conn, codes[f.Error])
			}
			for _, a := range v.V3.BadAcquire {
				raw, _ := hex.DecodeString(a.Hex)
				conn := batontest.Dial(t, ts.Addr)
				conn.Write(raw)
				expectError(t, conn, codes[a.Error])
			}
			for _, sc := range v.V3.Scenarios {
				conns := map[int]*batontest.Conn{}
				saved := map[string]string{}
				fill := func(where, s string) string {
					return placeholder.ReplaceAllStringFunc(s, func(m string) string {
						val, ok := saved[m[1:len(m)-1]]
						if !ok {
							t.Fatalf("%s: %s used before it is saved", where, m)
						}
						return val
					})
				}
				for i, st := range sc.Steps {
					where := fmt.Sprintf("%s, step %d (conn %d)", sc.What, i, st.Conn)
					if st.NewGeneration {
						if err := ts.Srv.NewGenerationNow(); err != nil {
							t.Fatalf("%s: new generation: %v", where, err)
						}
						continue
					}
					c := conns[st.Conn]
					if c == nil {
						c = batontest.Dial(t, ts.Addr)
						conns[st.Conn] = c
					}
					switch {
					case st.Send != "":
						raw, err := hex.DecodeString(fill(where, st.Send))
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						c.Write(raw)
					case st.Expect != "":
						f, err := c.TryReadFrame(frameWait)
						got := hex.EncodeToString(rawFrame(f))
						want := fill(where, st.Expect)
						if err != nil || !hexMatch(got, want) {
							t.Fatalf("%s: got %s (%v), want %s", where, got, err, want)
						}
						for name, span := range st.Save {
							saved[name] = got[2*span[0] : 2*(span[0]+span[1])]
						}
					case st.ExpectError != "":
						f, err := c.TryReadFrame(frameWait)
						if err != nil || f.Type != wire.TypeError || f.Err.Code.String() != st.ExpectError {
							t.Fatalf("%s: got %v (%v), want ERROR %s", where, f, err, st.ExpectError)
						}
						seenCodes.Store(f.Err.Code, struct{}{})
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
