package main

import "context"

// A Scenario is one measurement of a run, chosen by its name with
// -scenario. Run measures at the run's sizes (-smoke or full), puts its
// figures into r.res and reports a failed measurement with r.fail; it
// stops by itself within its own bound, and at once when ctx ends.
type Scenario interface {
	Name() string
	// UsesServer reports whether Run measures the run's shared standalone
	// Baton server (r.srv), and the flags that server needs for it. The
	// run starts that server once, before the first scenario, when a
	// scenario of the run uses it, and stops it after the last row of the
	// registry that uses it.
	UsesServer() (uses bool, flags []string)
	Run(ctx context.Context, r *runner)
}

// registry is every scenario, in the order a run measures them. A new
// scenario is a type in a file of its own and a row here. The baseline is
// not a row: it is every scenario's yardstick, and always measured first.
var registry = []Scenario{
	handoverScenario{},
	pollingScenario{},
	cyclesScenario{},
	semaphoreScenario{},
	detectScenario{},
	floorScenario{},
	scaleScenario{},
	clusterScenario{},
	failoverScenario{},
}

// scenarioNames are the names -scenario takes: the baseline's (which
// always runs) and the registry's.
func scenarioNames() []string {
	names := []string{"baseline"}
	for _, s := range registry {
		names = append(names, s.Name())
	}
	return names
}

// lastUsingServer is the index of the last row of the registry that uses
// the shared server, or -1.
func lastUsingServer() int {
	last := -1
	for i, s := range registry {
		if uses, _ := s.UsesServer(); uses {
			last = i
		}
	}
	return last
}

// noServer is for a Scenario that starts its own servers.
type noServer struct{}

func (noServer) UsesServer() (bool, []string) { return false, nil }

// sharedServer is for a Scenario that measures the shared server as it
// is started.
type sharedServer struct{}

func (sharedServer) UsesServer() (bool, []string) { return true, nil }

// pick is full, or small in a -smoke run.
func pick[T any](smoke bool, full, small T) T {
	if smoke {
		return small
	}
	return full
}
