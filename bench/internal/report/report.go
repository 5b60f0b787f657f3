// Package report holds the results of one run and renders them: JSON, the
// markdown tables of docs/benchmarks.md, and the charts.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/floor"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// Results is everything one run measured.
type Results struct {
	Started  time.Time         `json:"started"`
	Elapsed  time.Duration     `json:"elapsed_ns"`
	Command  string            `json:"command"`
	Smoke    bool              `json:"smoke"`
	Machine  Machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Skipped  []string          `json:"skipped,omitempty"`
	Failures []string          `json:"failures,omitempty"`

	Baseline *baseline.Result          `json:"baseline,omitempty"`
	Handover []scenario.HandoverResult `json:"handover,omitempty"`
	Cycles   []scenario.CyclesResult   `json:"cycles,omitempty"`
	// Semaphore is the semaphore scenario, every run of every round.
	Semaphore []scenario.SemaphoreResult `json:"semaphore,omitempty"`
	Detect    []scenario.DetectResult    `json:"detect,omitempty"`
	Scale     []scenario.ScaleResult     `json:"scale,omitempty"`
	// Polling is the handover beside a large queue, without and with
	// loops polling GET /v1/locks.
	Polling *scenario.PollingResult `json:"polling,omitempty"`
	// Floor is Baton against the minimal lock server.
	Floor *floor.Result `json:"floor,omitempty"`
	// FloorBefore is an earlier run's floor comparison (-floor-before),
	// drawn beside this one; FloorBeforeFrom is the file it came from.
	FloorBefore     *floor.Result           `json:"floor_before,omitempty"`
	FloorBeforeFrom string                  `json:"floor_before_from,omitempty"`
	Cluster         *scenario.ClusterResult `json:"cluster,omitempty"`
}

// Write puts results.json, the tables as Markdown and the charts in dir.
func Write(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(Markdown(r)), 0o644); err != nil {
		return err
	}
	if err := Charts(dir, r); err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	return nil
}
