//go:build !linux

package server

import "time"

// sleepPrecisely sleeps for d (at most timerSlack); elsewhere than Linux a
// plain sleep, with whatever resolution the platform's timers have.
func sleepPrecisely(d time.Duration) { time.Sleep(d) }
