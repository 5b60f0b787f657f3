package floor

import "testing"

// TestTimeWait: the sockstat line's tw field, and a count at the ceiling
// marks the run.
func TestTimeWait(t *testing.T) {
	if n, ok := sockstatTW("TCP: inuse 5 orphan 0 tw 1204 alloc 9 mem 1"); !ok || n != 1204 {
		t.Errorf("tw of the TCP line: %d %v, want 1204", n, ok)
	}
	if _, ok := sockstatTW("UDP: inuse 3 mem 1"); ok {
		t.Errorf("a tw in the UDP line")
	}
	if tw := ReadTimeWait(); tw.Max <= 0 || tw.Count < 0 {
		t.Logf("no TIME_WAIT count on this platform: %+v", tw) // not Linux
	}
	var r Result
	r.Rounds = []Round{{Floor: Figures{System: "floor"}, Baton: Figures{System: "baton", GoClient: &GoClient{}}}}
	r.Rounds[0].Baton.GoClient.Claims.TimeWait = TimeWait{Count: 131072, Max: 131072}
	r.Rounds[0].Floor.HotLock.TimeWait = TimeWait{Count: 1000, Max: 131072}
	if full := r.FullTimeWait(); len(full) != 1 || full[0] != "round 1, baton, Go client, claims, normal close" {
		t.Errorf("runs at the ceiling: %q", full)
	}
}
