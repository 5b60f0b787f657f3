// Package proc runs the processes the bench measures or drives (the Baton
// server, the echo server, the load generator) and stops them by PID.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Process is a started child. Its stderr is kept for error messages.
type Process struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Stdout *bufio.Reader

	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{}
	err    error
}

// Start runs name with args. The child gets its own process group so a
// Ctrl-C at the terminal reaches only the bench, which stops it in order.
func Start(name string, args ...string) (*Process, error) {
	return StartEnv(nil, name, args...)
}

// StartEnv is Start with the child's environment env (nil: the bench's).
func StartEnv(env []string, name string, args ...string) (*Process, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.Stdin, p.Stdout = stdin, bufio.NewReader(stdout)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := stderr.Read(buf)
			p.mu.Lock()
			if p.stderr.Len() < 1<<20 {
				p.stderr.Write(buf[:n])
			}
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		<-copied // Wait closes the pipe; read it to the end first
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the child's process id.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Stderr is what the child wrote to stderr so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Done is closed when the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ReadLine reads one line of the child's stdout, bounded by ctx.
func (p *Process) ReadLine(ctx context.Context) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := p.Stdout.ReadString('\n')
		ch <- result{strings.TrimRight(l, "\n"), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.line, fmt.Errorf("read from pid %d: %w (stderr: %s)", p.PID(), r.err, tail(p.Stderr()))
		}
		return r.line, nil
	case <-ctx.Done():
		// The reader goroutine ends when Stop closes the pipe.
		return "", fmt.Errorf("waiting for pid %d: %w", p.PID(), ctx.Err())
	}
}

// ErrExited is Await's error when the child ends before it is ready.
var ErrExited = errors.New("exited")

// Await asks ready every 10 ms until it holds (nil), the child exits (an
// error wrapping ErrExited), ctx ends (ctx's error) or timeout passes. It
// does not stop the child.
func (p *Process) Await(ctx context.Context, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("pid %d %w", p.PID(), ErrExited)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not ready within %v", p.PID(), timeout)
		}
	}
	return nil
}

// Stop sends SIGTERM to the child's PID, then SIGKILL after grace, and
// waits for it to exit.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	return nil
}

func tail(s string) string {
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return strings.TrimSpace(s)
}

// Executable is the path of the running bench binary, for re-executing it
// in a helper role.
func Executable() (string, error) { return os.Executable() }
