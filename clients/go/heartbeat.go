package baton

import "time"

// minHeartbeatInterval is the floor of the heartbeat interval.
//
// It only has to stop the RTT correction from driving the interval to zero or
// below when 2 × smoothed RTT reaches lease/4. Even at zero the loop could not
// spin: at most one heartbeat is in flight and the next one is timed from the
// previous reply, so the rate is already bounded by one per round trip. What
// the floor adds is a cap for the case where the estimate is inflated but the
// link is fast again (one slow reply on loopback): at most 1000 heartbeats a
// second, for the few beats the EWMA needs to forget the outlier. 1ms keeps
// the correction working for leases down to 4ms, which the model invites on
// one machine, and is well above timer resolution. Where lease/4 is below
// the floor, lease/4 wins: a floor must never let the server's lease run out.
const minHeartbeatInterval = time.Millisecond

// rttAlpha is the weight of a new round-trip sample in the smoothed RTT,
// 1/rttAlphaInv = 0.2, as the protocol prescribes.
const rttAlphaInv = 5

// schedule is the heartbeat schedule of one session, from docs/protocol.md:
//
//	baseInterval  = lease / 4
//	clientTimeout = lease * 0.8
//	safeRTT       = smoothedRTT * 2      // EWMA, alpha = 0.2
//	interval      = clamp(baseInterval - safeRTT, minHeartbeatInterval, baseInterval)
//
// The interval runs from the reply to the previous request, so a request is
// confirmed about every baseInterval whatever the round trip. It holds no
// clock: the session feeds it samples.
type schedule struct {
	lease time.Duration
	srtt  time.Duration // smoothed round trip; valid once samples > 0
	n     int           // samples taken
}

// observe adds one round-trip sample: the time from writing a request to
// reading its reply. The first sample is taken whole (as TCP does, RFC 6298):
// starting from zero would underestimate a slow link for its first beats.
func (s *schedule) observe(rtt time.Duration) {
	if rtt < 0 {
		rtt = 0
	}
	if s.n == 0 {
		s.srtt = rtt
	} else {
		s.srtt = ((rttAlphaInv-1)*s.srtt + rtt) / rttAlphaInv
	}
	s.n++
}

// base is lease/4: four beats per lease, so one late beat does not end it.
func (s *schedule) base() time.Duration { return s.lease / 4 }

// timeout is 0.8 × lease: how long the client goes without confirmation
// before it ends the session itself.
func (s *schedule) timeout() time.Duration { return s.lease * 4 / 5 }

// interval is the wait from a reply to the next heartbeat.
func (s *schedule) interval() time.Duration {
	base := s.base()
	d := base - 2*s.srtt
	d = max(d, minHeartbeatInterval)
	return min(d, base)
}
