package server

import (
	"net"
	"testing"
	"time"
)

// BenchmarkEventPublish is what one event costs under the server's mutex:
// the history ring and, when subscribers wait, one channel close for all of
// them (their number does not matter; each reads the ring by itself).
//
//	go test -run '^$' -bench EventPublish ./server
func BenchmarkEventPublish(b *testing.B) {
	r := record{at: time.Now(), typ: EventGranted, lock: "bench", owner: "o", id: 1,
		remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	b.Run("nobody-waiting", func(b *testing.B) {
		var l eventLog
		b.ReportAllocs()
		for b.Loop() {
			l.publishLocked(&r)
		}
	})
	b.Run("subscribers-waiting", func(b *testing.B) {
		var l eventLog
		b.ReportAllocs()
		for b.Loop() {
			l.wake = make(chan struct{}) // what the next Read of a waiting subscriber makes
			l.publishLocked(&r)
		}
	})
}
