// Package proctest runs child processes for tests: it builds the baton
// binary, sends the children's output lines to callbacks, awaits each end
// in a goroutine of its own, and kills at t.Cleanup whatever a test left
// running. It is imported only by tests (the reliability suite and the
// cluster fault harness).
package proctest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// LogBuffer keeps a child's output lines for failure messages.
type LogBuffer struct {
	mu    sync.Mutex
	lines []string
}

// Add appends one line.
func (b *LogBuffer) Add(l string) {
	b.mu.Lock()
	b.lines = append(b.lines, l)
	b.mu.Unlock()
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// Proc is a child process whose end is awaited by a goroutine of its own.
type Proc struct {
	Cmd      *exec.Cmd
	Exited   chan struct{} // closed when the process has ended
	Code     int           // exit code, -1 if killed by a signal; valid after Exited
	ExitedAt time.Time     // valid after Exited
	Readers  sync.WaitGroup
}

// Start starts cmd with its output lines going to stdout and stderr (each
// called from one goroutine of its own). At cleanup the process gets
// SIGCONT (in case a test left it stopped) and SIGKILL, and is awaited.
func Start(t testing.TB, cmd *exec.Cmd, stdout, stderr func(line string)) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Exited: make(chan struct{})}
	var pipes []*os.File
	for _, f := range []func(string){stdout, stderr} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, pw)
		if len(pipes) == 1 {
			cmd.Stdout = pw
		} else {
			cmd.Stderr = pw
		}
		p.Readers.Add(1)
		go func() { // ends when every holder of the write end has closed it
			defer p.Readers.Done()
			defer pr.Close()
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				f(sc.Text())
			}
		}()
	}
	err := cmd.Start()
	for _, pw := range pipes {
		pw.Close()
	}
	if err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() {
		cmd.Wait()
		p.ExitedAt = time.Now()
		p.Code = cmd.ProcessState.ExitCode()
		close(p.Exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-p.Exited
		p.Readers.Wait()
	})
	return p
}

// Signal sends sig to the process.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %d: %v", sig, p.Cmd.Process.Pid, err)
	}
}

// Wait waits for the process to end and returns its exit code.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.Exited:
		return p.Code
	case <-time.After(timeout):
		t.Fatalf("%v still running after %v", p.Cmd.Args, timeout)
		return 0
	}
}

// BuildBaton builds the baton command with goTool into dir/name, with the
// given build tags (none for the normal build), and returns its path.
func BuildBaton(goTool, dir, name string, tags ...string) (string, error) {
	bin := filepath.Join(dir, name)
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/batonlock/baton/cmd/baton")
	if out, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// RunChecked runs the tests of m and fails the package if they pass but a
// goroutine outlives them.
func RunChecked(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}
