//go:build race

package wire_test

// raceEnabled: the race detector is on (its sync.Pool drops items on
// purpose, so allocation counts do not hold).
const raceEnabled = true
