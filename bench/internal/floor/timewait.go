package floor

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TimeWait is the kernel's count of TCP sockets in TIME_WAIT in this
// network namespace (/proc/net/sockstat's "tw"), every process's, and its
// ceiling (net.ipv4.tcp_max_tw_buckets). At the ceiling the kernel keeps
// no TIME_WAIT for a closed connection ("time wait bucket table
// overflow"): a normal close then costs the client what a reset does, and
// a normal-close figure measured there is too good. The machine's other
// users share the count.
type TimeWait struct {
	Count int `json:"count"`
	Max   int `json:"max"`
}

// Full reports whether the count was at the ceiling (within 1 %).
func (tw TimeWait) Full() bool { return tw.Max > 0 && tw.Count >= tw.Max-tw.Max/100 }

// ReadTimeWait reads the count of this process's network namespace and
// the ceiling; zeros where the platform has neither.
func ReadTimeWait() TimeWait {
	var tw TimeWait
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_max_tw_buckets"); err == nil {
		tw.Max, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	f, err := os.Open("/proc/net/sockstat")
	if err != nil {
		return tw
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, ok := sockstatTW(sc.Text()); ok {
			tw.Count = n
		}
	}
	return tw
}

// sockstatTW parses the "tw" field of sockstat's TCP line:
// "TCP: inuse 5 orphan 0 tw 1204 alloc 9 mem 1".
func sockstatTW(line string) (int, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "TCP:" {
		return 0, false
	}
	for i := 1; i+1 < len(f); i += 2 {
		if f[i] == "tw" {
			n, err := strconv.Atoi(f[i+1])
			return n, err == nil
		}
	}
	return 0, false
}

func (tw TimeWait) String() string {
	if tw.Max == 0 {
		return fmt.Sprintf("%d in TIME_WAIT", tw.Count)
	}
	s := fmt.Sprintf("%d in TIME_WAIT (ceiling %d)", tw.Count, tw.Max)
	if tw.Full() {
		s += ": the ceiling, the kernel kept no TIME_WAIT for some closes, so a normal close cost less than it does below it"
	}
	return s
}

// FullTimeWait names the runs of r that ended with the machine's
// TIME_WAIT table at its ceiling, "round 2, baton, claims, normal close",
// whose normal-close figures are then too good.
func (r *Result) FullTimeWait() []string {
	var full []string
	add := func(i int, f *Figures, what string, tw TimeWait) {
		if tw.Full() {
			full = append(full, fmt.Sprintf("round %d, %s, %s", i+1, f.System, what))
		}
	}
	for i := range r.Rounds {
		for _, f := range []*Figures{&r.Rounds[i].Floor, &r.Rounds[i].Baton} {
			add(i, f, "hot lock, normal close", f.HotLock.TimeWait)
			add(i, f, "hot lock, RST release", f.HotLockRST.TimeWait)
			add(i, f, "claims, normal close", f.Claims.TimeWait)
			add(i, f, "claims, RST release", f.ClaimsRST.TimeWait)
			if g := f.GoClient; g != nil {
				add(i, f, "Go client, hot lock, normal close", g.HotLock.TimeWait)
				add(i, f, "Go client, hot lock, RST release", g.HotLockRST.TimeWait)
				add(i, f, "Go client, claims, normal close", g.Claims.TimeWait)
				add(i, f, "Go client, claims, RST release", g.ClaimsRST.TimeWait)
			}
		}
	}
	return full
}
