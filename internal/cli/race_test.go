//go:build race

package cli

// raceEnabled: this test binary runs with the race detector, which slows
// its own clients (TLS most) many times over.
const raceEnabled = true
