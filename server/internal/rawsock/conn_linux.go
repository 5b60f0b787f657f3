//go:build linux

package rawsock

import (
	"io/fs"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sockaddrTCP is sa as a *net.TCPAddr, as net's accept gives it.
func sockaddrTCP(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)))
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(sa.Addr)
		if sa.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				ip = ip.WithZone(ifi.Name)
			}
		}
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(sa.Port)))
	}
	return &net.TCPAddr{}
}

// Conn is a TCP connection accepted by an Acceptor, a net.Conn. While no goroutine
// has waited on it, its descriptor is used without waiting (Control, and
// Read and Write whose function does not ask to wait) and is counted by
// users, so that a Close meanwhile is carried out by the last of them,
// and the number cannot be reused under a write still running (the
// handover's push is written from another session's goroutine). The
// first blocking Read or Write, deadline, or RawConn wait hands the
// descriptor to an *os.File (pollable), which registers it with Go's
// runtime poller and owns it from then on: Close then closes the file.
type Conn struct {
	remote net.Addr

	mu     sync.Mutex
	fd     int
	users  int  // running uses of fd outside file
	closed bool // Close was called; the last user closes fd
	file   *os.File
	fraw   syscall.RawConn // file's
}

// enter counts a use of the descriptor, or returns file's RawConn to use
// instead, or net.ErrClosed.
func (sc *Conn) enter() (syscall.RawConn, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case sc.closed:
		return nil, net.ErrClosed
	case sc.fraw != nil:
		return sc.fraw, nil
	}
	sc.users++
	return nil, nil
}

// leave ends a use counted by enter, closing the descriptor if it was the
// last one after a Close.
func (sc *Conn) leave() {
	sc.mu.Lock()
	sc.users--
	last := sc.closed && sc.users == 0
	sc.mu.Unlock()
	if last {
		sc.closeFD()
	}
}

func (sc *Conn) closeFD() error {
	if sc.file != nil { // set before closed, under mu, and never again
		return sc.file.Close()
	}
	return unix.Close(sc.fd)
}

// pollable hands the descriptor to an *os.File, once, and returns it and
// its RawConn.
func (sc *Conn) pollable() (*os.File, syscall.RawConn, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		return nil, nil, net.ErrClosed
	}
	if sc.file == nil {
		f := os.NewFile(uintptr(sc.fd), "tcp") // non-blocking: registered with the runtime poller
		raw, err := f.SyscallConn()
		if err != nil { // not expected of an *os.File
			return nil, nil, err
		}
		sc.file, sc.fraw = f, raw
	}
	return sc.file, sc.fraw, nil
}

// opError wraps err of file's op as net's connections do, so that callers
// see the same errors (net.ErrClosed, os.ErrDeadlineExceeded, an Errno
// inside an *os.SyscallError, io.EOF bare).
func (sc *Conn) opError(op string, err error) error {
	if err == nil {
		return nil
	}
	pe, ok := err.(*fs.PathError) // what *os.File returns; no reflection
	if !ok {
		if err == net.ErrClosed {
			return &net.OpError{Op: op, Net: "tcp", Addr: sc.remote, Err: err}
		}
		return err // io.EOF
	}
	inner := pe.Err
	switch e := inner.(type) {
	case syscall.Errno:
		inner = os.NewSyscallError(op, e)
	default:
		if inner == os.ErrClosed {
			inner = net.ErrClosed
		}
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: sc.remote, Err: inner}
}

func (sc *Conn) Read(b []byte) (int, error) { return sc.fileIO("read", b, (*os.File).Read) }

func (sc *Conn) Write(b []byte) (int, error) { return sc.fileIO("write", b, (*os.File).Write) }

// fileIO is Read's and Write's: op of the file, which may wait.
func (sc *Conn) fileIO(op string, b []byte, do func(*os.File, []byte) (int, error)) (int, error) {
	f, _, err := sc.pollable()
	if err != nil {
		return 0, sc.opError(op, err)
	}
	n, err := do(f, b)
	return n, sc.opError(op, err)
}

// Close closes the connection; if a use of the descriptor is running, its
// end closes it.
func (sc *Conn) Close() error {
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return &net.OpError{Op: "close", Net: "tcp", Addr: sc.remote, Err: net.ErrClosed}
	}
	sc.closed = true
	last := sc.users == 0
	sc.mu.Unlock()
	if !last {
		return nil
	}
	return sc.opError("close", sc.closeFD())
}

// CloseWrite half-closes: the client reads a FIN after what was written.
func (sc *Conn) CloseWrite() error {
	var err error
	if cerr := sc.rawConn().Control(func(fd uintptr) { err = unix.Shutdown(int(fd), unix.SHUT_WR) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return &net.OpError{Op: "close", Net: "tcp", Addr: sc.remote, Err: os.NewSyscallError("shutdown", err)}
	}
	return nil
}

func (sc *Conn) RemoteAddr() net.Addr { return sc.remote }

// LocalAddr asks the kernel each time: the server never asks, so the
// accept does not.
func (sc *Conn) LocalAddr() net.Addr {
	var sa unix.Sockaddr
	sc.rawConn().Control(func(fd uintptr) { sa, _ = unix.Getsockname(int(fd)) })
	return sockaddrTCP(sa)
}

func (sc *Conn) SetDeadline(t time.Time) error { return sc.setDeadline(t, (*os.File).SetDeadline) }

func (sc *Conn) SetReadDeadline(t time.Time) error {
	return sc.setDeadline(t, (*os.File).SetReadDeadline)
}

func (sc *Conn) SetWriteDeadline(t time.Time) error {
	return sc.setDeadline(t, (*os.File).SetWriteDeadline)
}

// setDeadline sets a deadline of the file: only a file can wait.
func (sc *Conn) setDeadline(t time.Time, set func(*os.File, time.Time) error) error {
	f, _, err := sc.pollable()
	if err != nil {
		return sc.opError("set", err)
	}
	return sc.opError("set", set(f, t))
}

// rawConn is sc's descriptor as a syscall.RawConn (see Conn).
func (sc *Conn) rawConn() syscall.RawConn { return (*connRaw)(sc) }

// SyscallConn gives the descriptor, as net's connections do.
func (sc *Conn) SyscallConn() (syscall.RawConn, error) { return sc.rawConn(), nil }

// connRaw is a Conn's syscall.RawConn.
type connRaw Conn

func (r *connRaw) Control(f func(fd uintptr)) error {
	fraw, _, err := (*Conn)(r).direct(func(fd uintptr) bool { f(fd); return true })
	if fraw != nil {
		return fraw.Control(f)
	}
	return err
}

// Read calls f on the descriptor; if f asks to wait (returns false), the
// descriptor becomes pollable and the file's RawConn waits and calls f
// again.
func (r *connRaw) Read(f func(fd uintptr) bool) error {
	return r.use(f, func(raw syscall.RawConn) error { return raw.Read(f) })
}

// Write is Read's counterpart for writing.
func (r *connRaw) Write(f func(fd uintptr) bool) error {
	return r.use(f, func(raw syscall.RawConn) error { return raw.Write(f) })
}

func (r *connRaw) use(f func(fd uintptr) bool, wait func(syscall.RawConn) error) error {
	sc := (*Conn)(r)
	fraw, done, err := sc.direct(f)
	switch {
	case err != nil:
		return err
	case fraw != nil:
		return wait(fraw)
	case done:
		return nil
	}
	if _, fraw, err = sc.pollable(); err != nil {
		return err
	}
	return wait(fraw)
}

// direct calls f on the descriptor as a counted use (see Conn), and
// returns what f returned; or, once the descriptor is the file's, the
// file's RawConn without calling f; or net.ErrClosed.
func (sc *Conn) direct(f func(fd uintptr) bool) (fraw syscall.RawConn, done bool, err error) {
	if fraw, err = sc.enter(); err != nil || fraw != nil {
		return fraw, false, err
	}
	defer sc.leave()
	return nil, f(uintptr(sc.fd)), nil
}

// ResetOnClose makes the close of sc a TCP reset (SO_LINGER 0), as
// net.TCPConn's SetLinger(0) does; best effort, as a close is.
func (sc *Conn) ResetOnClose() {
	sc.rawConn().Control(func(fd uintptr) {
		unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	})
}
