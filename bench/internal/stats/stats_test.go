package stats

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i))
	}
	got := Summarize(s)
	want := Summary{N: 100, P50: 50, P99: 99, Max: 100, Mean: 50}
	if got != want {
		t.Errorf("Summarize(1..100) = %+v, want %+v", got, want)
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want the zero Summary", got)
	}
	if got := Summarize([]time.Duration{-3, 7}); got.P50 != -3 || got.Max != 7 {
		t.Errorf("Summarize(-3, 7) = %+v: negative samples (detection too early) must survive", got)
	}
}

func TestRatio(t *testing.T) {
	if r := Ratio(3*time.Microsecond, 2*time.Microsecond); r != 1.5 {
		t.Errorf("Ratio(3µs, 2µs) = %v, want 1.5", r)
	}
	if r := Ratio(time.Second, 0); r != 0 {
		t.Errorf("Ratio(1s, 0) = %v, want 0 (no baseline)", r)
	}
}

func TestMedian(t *testing.T) {
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median(4, 1, 3, 2) = %v, want 2.5", got)
	}
	if got := Median([]float64{5, 1, 3}); got != 3 {
		t.Errorf("Median(5, 1, 3) = %v, want 3", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %v, want 0", got)
	}
}
