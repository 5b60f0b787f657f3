package batonsys

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildProfiled is Build with one file added to package main through a
// build overlay (the repository is not touched): mainSource, which lets
// the bench take CPU profiles of the running server (package profsig).
func BuildProfiled(ctx context.Context, root, dir, mainSource string) (string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "zz_benchprofile.go")
	if err := os.WriteFile(src, []byte(mainSource), 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(absRoot, "cmd", "baton", "zz_benchprofile.go"): src},
	})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "baton")
	cmd := exec.CommandContext(ctx, "go", "build", "-overlay", ov, "-o", bin, "./cmd/baton")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build baton with the profiling overlay in %s: %w: %s", root, err, out)
	}
	return bin, nil
}
