package baton

import (
	"testing"
	"time"
)

func TestScheduleInterval(t *testing.T) {
	for _, tc := range []struct {
		lease, srtt, want time.Duration
	}{
		{30 * time.Second, 0, 7500 * time.Millisecond},                    // fast link: lease/4
		{30 * time.Second, time.Second, 5500 * time.Millisecond},          // 7.5s - 2×1s
		{30 * time.Second, 3 * time.Second, 1500 * time.Millisecond},      // 7.5s - 6s
		{30 * time.Second, 3750 * time.Millisecond, minHeartbeatInterval}, // 7.5s - 7.5s: floor
		{30 * time.Second, time.Minute, minHeartbeatInterval},             // RTT above the lease: floor
		{2 * time.Second, 100 * time.Millisecond, 300 * time.Millisecond}, // 500ms - 200ms
		{4 * time.Millisecond, 0, time.Millisecond},                       // smallest lease with the floor
		{2 * time.Millisecond, time.Millisecond, 500 * time.Microsecond},  // lease/4 under the floor: lease/4 wins
		{time.Millisecond, 0, 250 * time.Microsecond},                     // the smallest lease
	} {
		s := schedule{lease: tc.lease, srtt: tc.srtt, n: 1}
		if got := s.interval(); got != tc.want {
			t.Errorf("lease %v, srtt %v: interval %v, want %v", tc.lease, tc.srtt, got, tc.want)
		}
	}
}

func TestScheduleTimeout(t *testing.T) {
	for lease, want := range map[time.Duration]time.Duration{
		30 * time.Second: 24 * time.Second,
		time.Second:      800 * time.Millisecond,
		time.Millisecond: 800 * time.Microsecond,
		maxLease:         maxLease / 5 * 4,
	} {
		s := schedule{lease: lease}
		if got := s.timeout(); got != want {
			t.Errorf("lease %v: timeout %v, want %v", lease, got, want)
		}
	}
}

// TestScheduleEWMA checks alpha = 0.2 against a float computation, the
// first sample being taken whole.
func TestScheduleEWMA(t *testing.T) {
	samples := []time.Duration{
		time.Second, 0, 0, 0, 3 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond,
	}
	var s schedule
	var want float64
	for i, rtt := range samples {
		s.observe(rtt)
		if i == 0 {
			want = float64(rtt)
		} else {
			want = 0.8*want + 0.2*float64(rtt)
		}
		if d := float64(s.srtt) - want; d > 5 || d < -5 {
			t.Errorf("after sample %d (%v): srtt %v, want %v", i, rtt, s.srtt, time.Duration(want))
		}
	}
	// 1s, 0.8s, 0.64s, 0.512s, then 3s: 0.8×0.512 + 0.6 = 1.0096s.
	s = schedule{}
	for _, rtt := range samples[:5] {
		s.observe(rtt)
	}
	if want := 1009600 * time.Microsecond; s.srtt != want {
		t.Errorf("srtt %v, want %v", s.srtt, want)
	}
}
