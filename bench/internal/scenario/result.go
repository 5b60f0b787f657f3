package scenario

import "time"

// The fields every result shares, embedded so that each keeps its place
// in the result's JSON.

// Failures counts a run's failed operations (a Lock, an Unlock, a claim).
type Failures struct {
	Errors int `json:"errors"`
	// LastError is the last failed operation's error, if any failed.
	LastError string `json:"last_error,omitempty"`
}

// Cost is what a run cost the server: the CPU time of its process over
// the measured window.
type Cost struct {
	ServerCPU time.Duration `json:"server_cpu_ns"`
}

// Per is the server's CPU time per one of n operations, or 0 when there
// were none.
func (c Cost) Per(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return c.ServerCPU / time.Duration(n)
}
