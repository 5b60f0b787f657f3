package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/internal/floor"
)

func floorResult(floorCPU, batonCPU time.Duration) *floor.Result {
	var rd floor.Round
	rd.Floor.System, rd.Baton.System = "floor", "baton"
	rd.Floor.HotLock.CPUPerGrant, rd.Baton.HotLock.CPUPerGrant = floorCPU, batonCPU
	rd.Baton.GoClient = &floor.GoClient{}
	rd.Baton.GoClient.Claims.PerSec, rd.Baton.GoClient.ClaimsRST.PerSec = 1000, 2500
	return &floor.Result{Contenders: 8, Idle: floor.Idle, Rounds: []floor.Round{rd}}
}

// TestFloorBeforeAfter: with an earlier run's comparison, the table gains
// its ratios and the chart draws both.
func TestFloorBeforeAfter(t *testing.T) {
	r := &Results{Floor: floorResult(40*time.Microsecond, 40*time.Microsecond)}
	md := FloorMarkdown(r)
	if !strings.Contains(md, "| hot lock, 8 contenders: server CPU per grant | 40.0 µs | 40.0 µs | 1.00× | ≤ 1.00× | met |") {
		t.Errorf("floor table without the expected row:\n%s", md)
	}
	if !strings.Contains(md, "RST release ÷ normal close (`WithNormalClose`) | – | 2500 / 1000 | 2.50× | ≥ 2.00× | met |") {
		t.Errorf("floor table without the Go client's RST ÷ normal close row and its minimum:\n%s", md)
	}
	if strings.Contains(md, "hot lock owner changes/s, 8 contenders, the Go client") || strings.Contains(md, "handover p50 after") {
		t.Errorf("floor table with rows never measured:\n%s", md)
	}
	r.FloorBefore, r.FloorBeforeFrom = floorResult(40*time.Microsecond, 60*time.Microsecond), "/tmp/before/results.json"
	md = FloorMarkdown(r)
	if !strings.Contains(md, "| 1.00× | 1.50× | ≤ 1.00× | met |") || !strings.Contains(md, "/tmp/before/results.json") {
		t.Errorf("floor table without the before column:\n%s", md)
	}
	dir := t.TempDir()
	if err := floorChart(filepath.Join(dir, FloorChart), r); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, FloorChart)); err != nil || st.Size() == 0 {
		t.Errorf("%s: %v", FloorChart, err)
	}
	if FloorMarkdown(&Results{}) != "" {
		t.Errorf("a run without the floor scenario has a floor section")
	}
}
