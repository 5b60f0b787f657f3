//go:build !unix

package fence

import (
	"errors"
	"os"
)

// SidecarSuffix names the file beside a fenced file that keeps its mark.
const SidecarSuffix = ".fence"

var errNoFlock = errors.New("fence: the file kit needs flock(2), which this system lacks")

// Check is the file kit's check; it needs flock(2).
func Check(path string, h Holder) error { return errNoFlock }

// WriteFile is the file kit's write; it needs flock(2).
func WriteFile(path string, data []byte, perm os.FileMode, h Holder) error { return errNoFlock }
