package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/batonlock/baton/internal/batontest"
)

// openPty opens a pseudo-terminal; t.Cleanup closes both ends. The test
// is skipped where there is none.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	// Non-blocking, so that the runtime poller serves it and Close ends a
	// Read in progress.
	fd, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	m := os.NewFile(uintptr(fd), "/dev/ptmx")
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Skipf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		m.Close()
		t.Skipf("ptsname: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open the pty's terminal: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		m.Close()
	})
	return m, s
}

// TestRunStatusOnTerminal runs baton run with stderr on a terminal: while
// it waits, one line rewritten in place tells the position, the time and
// the holder; it is cleared when the lock is granted.
func TestRunStatusOnTerminal(t *testing.T) {
	t.Parallel()
	master, slave := openPty(t)
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, "")
	held := holdLock(t, srv.Addr, "jobs/tty", "holder:1")

	cmd := batonCmd(t, "run", "-addr", srv.Addr, "-ops-addr", opsAddr, "jobs/tty", "--", "sh", "-c", "echo ran")
	var stdout batontest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	var screen batontest.SyncBuffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&screen, master) // ends when the cleanup closes master
		close(copied)
	}()
	t.Cleanup(func() {
		master.Close()
		<-copied
	})

	batontest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(screen.String(), "held by holder:1")
	}, "no status line with the holder on the terminal; got %q", &screen)
	// Let the time waited tick once: the line is rewritten, not repeated.
	batontest.Eventually(t, 10*time.Second, func() bool {
		return strings.Count(screen.String(), "\rbaton run: waiting for jobs/tty: ") >= 2
	}, "the status line was not refreshed; got %q", &screen)
	held.Release()
	select {
	case <-done:
	case <-time.After(procTimeout):
		t.Fatalf("baton run did not finish; terminal: %q", &screen)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0; terminal: %q", code, &screen)
	}
	if got := stdout.String(); got != "ran\n" {
		t.Errorf("stdout %q, want \"ran\\n\"", got)
	}
	// The terminal may hand over the last bytes after the exit.
	batontest.Eventually(t, 5*time.Second, func() bool {
		return strings.HasSuffix(screen.String(), "\r\x1b[K")
	}, "the status line was not cleared at the end; terminal: %q", &screen)
	got := screen.String()
	if !strings.Contains(got, "\rbaton run: waiting for jobs/tty: position 1, ") {
		t.Errorf("terminal %q lacks the position", got)
	}
	if strings.Contains(got, "\n") {
		t.Errorf("terminal %q: the status took more than one line", got)
	}
}
