//go:build race

package clients

// raceEnabled: this test binary runs with the race detector, and so does
// the Go client's suite that it starts.
const raceEnabled = true
