package server

import (
	"testing"
	"time"
)

// BenchmarkEventPublish is what one event costs under the server's mutex:
// the history ring and, when subscribers wait, one channel close for all of
// them (their number does not matter; each reads the ring by itself).
//
//	go test -run '^$' -bench EventPublish ./server
func BenchmarkEventPublish(b *testing.B) {
	e := Event{At: time.Now(), Type: EventGranted, Lock: "bench", Session: SessionView{ID: "1", Owner: "o", Remote: "127.0.0.1:1"}}
	b.Run("nobody-waiting", func(b *testing.B) {
		var l eventLog
		b.ReportAllocs()
		for b.Loop() {
			l.publishLocked(e)
		}
	})
	b.Run("subscribers-waiting", func(b *testing.B) {
		var l eventLog
		b.ReportAllocs()
		for b.Loop() {
			l.wake = make(chan struct{}) // what the next Read of a waiting subscriber makes
			l.publishLocked(e)
		}
	})
}
