package baton

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// version3Vectors is what the client's tests read of the version_3
// section of wire/testdata/vectors.json.
type version3Vectors struct {
	Frames []struct {
		What   string `json:"what"`
		Hex    string `json:"hex"`
		Type   string `json:"type"`
		Fields struct {
			NoWait  bool   `json:"nowait"`
			Shared  bool   `json:"shared"`
			LeaseMs int64  `json:"lease_ms"`
			Limit   int    `json:"limit"`
			Name    string `json:"name"`
			Owner   string `json:"owner"`
		} `json:"fields"`
	} `json:"frames"`
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

func loadVersion3Vectors(t *testing.T) version3Vectors {
	t.Helper()
	b, err := os.ReadFile("wire/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Version3 version3Vectors `json:"version_3"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("wire/testdata/vectors.json: %v", err)
	}
	if len(v.Version3.Frames) == 0 || len(v.Version3.Scenarios) == 0 {
		t.Fatalf("wire/testdata/vectors.json has no version 3 frames or scenarios")
	}
	return v.Version3
}

// TestFakeServerPlaysTheVectors plays every conversation of the version 3
// vectors against the fake server the client's tests use, over TCP, as a
// server's conformance test does: the fake is a server of the spec, not
// one made to fit the client.
func TestFakeServerPlaysTheVectors(t *testing.T) {
	v := loadVersion3Vectors(t)
	placeholder := regexp.MustCompile(`\{([a-z0-9_]+)\}`)
	for _, sc := range v.Scenarios {
		t.Run(sc.What, func(t *testing.T) {
			f := newFakeCluster(t, "")
			addr := f.listen(t)
			f.setLeader(addr)
			conns := map[int]net.Conn{}
			saved := map[string]string{}
			conn := func(i int) net.Conn {
				if c, ok := conns[i]; ok {
					return c
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				conns[i] = c
				return c
			}
			fill := func(s string) string {
				return placeholder.ReplaceAllStringFunc(s, func(m string) string { return saved[m[1:len(m)-1]] })
			}
			readFrame := func(c net.Conn) ([]byte, error) {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				var h [wire.HeaderSize]byte
				if _, err := io.ReadFull(c, h[:]); err != nil {
					return nil, err
				}
				hdr, err := wire.ParseHeader(h[:])
				if err != nil {
					return nil, err
				}
				b := make([]byte, wire.HeaderSize+int(hdr.Length))
				copy(b, h[:])
				_, err = io.ReadFull(c, b[wire.HeaderSize:])
				return b, err
			}
			for i, st := range sc.Steps {
				switch {
				case st.NewGeneration:
					f.newGeneration()
				case st.Send != "":
					if _, err := conn(*st.Conn).Write(mustHex(t, fill(st.Send))); err != nil {
						t.Fatalf("step %d: send: %v", i, err)
					}
				case st.Close:
					conn(*st.Conn).Close()
				case st.Expect != "":
					b, err := readFrame(conn(*st.Conn))
					if err != nil {
						t.Fatalf("step %d: expect %s: %v", i, st.Expect, err)
					}
					want := strings.ToLower(fill(st.Expect))
					got := hex.EncodeToString(b)
					ok := len(got) == len(want)
					for j := 0; ok && j < len(want); j++ {
						ok = want[j] == '.' || want[j] == got[j]
					}
					if !ok {
						t.Fatalf("step %d: got %s, want %s", i, got, want)
					}
					for name, span := range st.Save {
						saved[name] = hex.EncodeToString(b[span[0] : span[0]+span[1]])
					}
				case st.ExpectError != "":
					b, err := readFrame(conn(*st.Conn))
					if err != nil {
						t.Fatalf("step %d: expect ERROR %s: %v", i, st.ExpectError, err)
					}
					if wire.Type(b[0]) != wire.TypeError || wire.Code(b[3]).String() != st.ExpectError {
						t.Fatalf("step %d: got % x, want ERROR %s", i, b, st.ExpectError)
					}
				case st.ExpectClosed:
					if b, err := readFrame(conn(*st.Conn)); err != io.EOF {
						t.Fatalf("step %d: got % x, %v; want the end of the stream", i, b, err)
					}
				}
			}
		})
	}
}

// TestVersion3VectorsFromTheClient: the client's version 3 ACQUIREs are the
// vectors' bytes, and so is its resume of a holder (after SHUTDOWN, with
// the credential of the grant vector) and of a shared waiter (its second
// attempt, after NOT_LEADER with no leader known).
func TestVersion3VectorsFromTheClient(t *testing.T) {
	v := loadVersion3Vectors(t)
	vector := func(prefix string) []byte {
		for _, f := range v.Frames {
			if strings.HasPrefix(f.What, prefix) {
				return mustHex(t, f.Hex)
			}
		}
		t.Fatalf("no vector %q", prefix)
		return nil
	}
	for _, f := range v.Frames {
		if f.Type != "ACQUIRE" || strings.Contains(f.What, "resum") {
			continue
		}
		t.Run(f.What, func(t *testing.T) {
			fl := f.Fields
			opts := []Option{WithLease(time.Duration(fl.LeaseMs) * time.Millisecond), WithOwner(fl.Owner), WithNoWait(fl.NoWait)}
			if fl.Shared {
				opts = append(opts, WithLimit(fl.Limit))
			}
			synctest.Test(t, func(t *testing.T) {
				got, _ := sentAcquire(t, fl.Name, opts...)
				if want := mustHex(t, f.Hex); !bytes.Equal(got, want) {
					t.Errorf("ACQUIRE % x, want % x", got, want)
				}
			})
		})
	}
	t.Run("a holder's resume", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(10*time.Second), WithOwner("h:1"))
			ch := goAcquire(t.Context(), c, "jobs")
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.send(t, vector("ACQUIRED reply with CREDENTIAL"))
			l := result(t, ch).l
			p.fail(t, wire.CodeShutdown, "bye")
			p = pn.accept(t)
			f := p.next(t, wire.TypeAcquire)
			if got, want := wire.AppendFrame(nil, f.typ, f.payload), vector("ACQUIRE v3 resuming a holder"); !bytes.Equal(got, want) {
				t.Errorf("resume % x, want % x", got, want)
			}
			l.Release()
		})
	})
	t.Run("a shared waiter's second attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(10*time.Second), WithOwner(""))
			ch := goAcquire(t.Context(), c, "jobs", WithLimit(3))
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			w := wire.Waiting{Position: 2, WithTicket: true, Ticket: 0x0000030000000009, Generation: 1}
			copy(w.Credential[:], mustHex(t, "eba34481e394b269f4606e86f8c5f9dc"))
			p.send(t, wire.AppendWaitingV3(nil, w))
			p.fail(t, wire.CodeShutdown, "bye")
			p = pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.fail(t, wire.CodeNotLeader, "") // attempt 1 ends at once
			p = pn.accept(t)
			f := p.next(t, wire.TypeAcquire)
			if got, want := wire.AppendFrame(nil, f.typ, f.payload), vector("ACQUIRE v3 resuming a shared waiter"); !bytes.Equal(got, want) {
				t.Errorf("resume % x, want % x", got, want)
			}
			p.conn.Close()
			p = pn.accept(t) // the same attempt again, after the end of the stream
			p.fail(t, wire.CodeKicked, "")
			if r := result(t, ch); !errors.Is(r.err, ErrKicked) {
				t.Errorf("Acquire: %v, want ErrKicked", r.err)
			}
		})
	})
}
