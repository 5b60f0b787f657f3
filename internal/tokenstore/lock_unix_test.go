//go:build unix

package tokenstore

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDataDirLockedAgainstOtherProcesses runs this test binary again as a
// child that tries to open a data directory this process holds: it must be
// refused, so two servers never hand out the same tokens.
func TestDataDirLockedAgainstOtherProcesses(t *testing.T) {
	if dir := os.Getenv("TOKENSTORE_CHILD_DIR"); dir != "" {
		_, err := Open(dir)
		if err == nil {
			os.Stdout.WriteString("opened\n")
			os.Exit(0)
		}
		os.Stdout.WriteString("refused: " + err.Error() + "\n")
		os.Exit(3)
	}
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatalf("second Open in the same process: %v, want it to succeed (a restart)", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataDirLockedAgainstOtherProcesses$")
	cmd.Env = append(os.Environ(), "TOKENSTORE_CHILD_DIR="+dir)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("child Open of a held directory: %v, output %q; want refused (exit 3)", err, out)
	}
	if !strings.Contains(string(out), "in use by another process") {
		t.Errorf("child's error %q does not say the directory is in use", out)
	}
}
