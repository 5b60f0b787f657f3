package clock

import (
	"testing"
	"time"
)

// TestNowAdvances: readings never go back and follow the monotonic clock
// while nothing is suspended.
func TestNowAdvances(t *testing.T) {
	start, mono := Now(), time.Now()
	prev := start
	for range 1000 {
		now := Now()
		if now.Before(prev) {
			t.Fatalf("Now() went back: %v after %v", now.Sub(start), prev.Sub(start))
		}
		prev = now
	}
	time.Sleep(20 * time.Millisecond)
	got, want := Now().Sub(start), time.Since(mono)
	// Both read after the sleep: the clock's reading comes first, so it
	// may be short by the time between the two reads, never long by more
	// than a suspend during the test.
	if got < 20*time.Millisecond || got > want+time.Second {
		t.Errorf("after a sleep of 20ms: Now() moved %v, time.Since moved %v", got, want)
	}
}

// TestWallCheckedCountsASuspend: the fallback clock counts the wall clock's
// jumps ahead of the monotonic clock (a suspend, or a step forward, the
// safe side), and nothing else: jitter within the tolerance does not add
// up, and a step back is not counted, and hides no suspend after it.
func TestWallCheckedCountsASuspend(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		// pairs of readings since the start: wall, monotonic
		steps [][2]time.Duration
		want  time.Duration // the last reading
	}{
		{"no suspend", [][2]time.Duration{{10 * ms, 10 * ms}, {20 * ms, 20 * ms}}, 20 * ms},
		{"suspend of 30s", [][2]time.Duration{{10 * ms, 10 * ms}, {30*time.Second + 20*ms, 20 * ms}}, 30*time.Second + 20*ms},
		{"suspend, then time goes on", [][2]time.Duration{{30*time.Second + 20*ms, 20 * ms}, {30*time.Second + 50*ms, 50 * ms}}, 30*time.Second + 50*ms},
		{"two suspends", [][2]time.Duration{{5*time.Second + 20*ms, 20 * ms}, {12*time.Second + 30*ms, 30 * ms}}, 12*time.Second + 30*ms},
		{"wall clock steps forward: counted", [][2]time.Duration{{10 * ms, 10 * ms}, {time.Hour + 20*ms, 20 * ms}}, time.Hour + 20*ms},
		{"wall clock steps back: not counted", [][2]time.Duration{{10 * ms, 10 * ms}, {-time.Hour + 20*ms, 20 * ms}, {-time.Hour + 30*ms, 30 * ms}}, 30 * ms},
		{"step back, then a suspend shorter than it", [][2]time.Duration{{-time.Hour + 20*ms, 20 * ms}, {-time.Hour + 10*time.Second + 30*ms, 30 * ms}}, 10*time.Second + 30*ms},
		{"step back, then forward again: counted once", [][2]time.Duration{{-time.Hour + 20*ms, 20 * ms}, {30 * ms, 30 * ms}}, time.Hour + 30*ms},
		{"jitter within the tolerance", [][2]time.Duration{{11 * ms, 10 * ms}, {19 * ms, 20 * ms}, {31 * ms, 30 * ms}}, 30 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &wallChecked{}
			var got time.Duration
			for _, s := range tc.steps {
				next := c.advance(s[0], s[1])
				if next < got {
					t.Errorf("reading went back: %v after %v", next, got)
				}
				got = next
			}
			if got != tc.want {
				t.Errorf("reading after %v = %v, want %v", tc.steps, got, tc.want)
			}
		})
	}
}

// TestWallCheckedJitterDoesNotAddUp: a million readings whose wall clock
// wanders within the tolerance leave the clock on the monotonic one.
func TestWallCheckedJitterDoesNotAddUp(t *testing.T) {
	c := &wallChecked{}
	var got time.Duration
	for i := range 1_000_000 {
		mono := time.Duration(i) * time.Microsecond
		jitter := time.Duration(i%7-3) * (tolerance / 8) // a range of 0.75 × tolerance
		got = c.advance(mono+jitter, mono)
	}
	if want := 999_999 * time.Microsecond; got != want {
		t.Errorf("after a million readings with jitter: %v, want %v", got, want)
	}
}

// TestWallCheckedSince: the fallback clock as the process reads it.
func TestWallCheckedSince(t *testing.T) {
	c := newWallChecked()
	a := c.since()
	time.Sleep(10 * time.Millisecond)
	if b := c.since(); b-a < 10*time.Millisecond || b-a > time.Second {
		t.Errorf("since() moved %v across a sleep of 10ms", b-a)
	}
}

var sink time.Time

// BenchmarkNow is the cost of one reading of the clock; compare with
// BenchmarkTimeNow.
func BenchmarkNow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = Now()
	}
}

func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = time.Now()
	}
}

// BenchmarkWallChecked is the fallback's cost, where it is the clock.
func BenchmarkWallChecked(b *testing.B) {
	c := newWallChecked()
	b.ReportAllocs()
	for b.Loop() {
		sink = time.Unix(0, int64(c.since()))
	}
}
