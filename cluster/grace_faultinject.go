//go:build faultinject

package cluster

import "os"

// graceDisabled is the fault harness's control knob, in test builds only
// (go build -tags faultinject ./cmd/baton): with BATON_TEST_DISABLE_GRACE=1
// in its environment a new leader grants at once, without the failover
// grace, so that the checker can be shown to catch the overlap the grace
// prevents. Normal builds do not contain this file and ignore the variable.
func graceDisabled() bool { return os.Getenv("BATON_TEST_DISABLE_GRACE") == "1" }
