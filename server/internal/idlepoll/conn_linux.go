package idlepoll

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// Conn is a session's connection as the poller sees it: its descriptor,
// its reads and writes that never wait, and its part of its shard's
// bookkeeping. The zero Conn is not bound (Bind): such a session never
// parks.
type Conn[T comparable] struct {
	io rawIO

	// Guarded by shard's mutex.
	shard      *Shard[T] // set once, by Bind
	registered bool      // in the shard's epoll set, armed
	parked     bool      // no reader goroutine runs; the shard may answer it
	// inDue: in the shard's due list; dueNext and duePrev link it.
	inDue            bool
	dueNext, duePrev T
}

// rawIO is a Conn's descriptor and what TryRead and TryWrite need, bound
// once so that they allocate nothing. It is not generic, so that its
// callbacks carry no type dictionary (a word more each, per session).
type rawIO struct {
	// raw is the connection's descriptor; nil until bind.
	raw syscall.RawConn
	fd  int32
	// read reads into buf and sets n and errno; write writes wbuf and
	// sets wn and werr.
	read  func(fd uintptr) bool
	buf   []byte
	n     int
	errno error
	write func(fd uintptr)
	wbuf  []byte
	wn    int
	werr  error
}

// Bound reports whether e has a descriptor (Bind): only then can its
// session park, and TryRead and TryWrite be used.
func (e *Conn[T]) Bound() bool { return e.io.raw != nil }

// Bind readies e, of a new session, for parking, if raw gives its
// descriptor, and gives it a shard; false if it cannot.
func (p *Poller[T]) Bind(e *Conn[T], raw syscall.RawConn) bool {
	if !e.io.bind(raw) {
		return false
	}
	e.shard = p.shards[int(p.next.Add(1))%len(p.shards)]
	return true
}

func (r *rawIO) bind(raw syscall.RawConn) bool {
	fd := int32(-1)
	if err := raw.Control(func(d uintptr) { fd = int32(d) }); err != nil || fd < 0 {
		return false
	}
	// The descriptor stays r's while it is used: a session parks on its
	// reader, the only goroutine that closes the connection of a session
	// not yet ended, and ended sessions do not park.
	r.raw = raw
	r.fd = fd
	r.read = func(fd uintptr) bool {
		for {
			r.n, r.errno = unix.Read(int(fd), r.buf)
			if r.errno != unix.EINTR {
				return true // never let Go's poller wait: parking is ours
			}
		}
	}
	r.write = func(fd uintptr) {
		for { // the socket is non-blocking: this never waits
			r.wn, r.werr = unix.Write(int(fd), r.wbuf)
			if r.werr != unix.EINTR {
				return
			}
		}
	}
	return true
}

// unwatch removes r's descriptor from epoll set epfd, under the
// descriptor's reference (see deregisterLocked).
func (r *rawIO) unwatch(epfd int) {
	r.raw.Control(func(fd uintptr) {
		unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// TryRead reads what e's connection has, without waiting: ErrWouldBlock
// if nothing, io.EOF at the client's close. Only the session's owner
// reads (see the package's doc).
func (e *Conn[T]) TryRead(b []byte) (int, error) { return e.io.tryRead(b) }

func (r *rawIO) tryRead(b []byte) (int, error) {
	r.buf = b
	err := r.raw.Read(r.read)
	n, errno := r.n, r.errno
	r.buf, r.errno = nil, nil
	switch {
	case err != nil: // closed, or a deadline passed (the session is ending)
		return 0, err
	case errno == unix.EAGAIN:
		return 0, ErrWouldBlock
	case errno != nil:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// TryWrite writes b to e's connection without waiting, and returns how
// much went out: less than len(b) when the socket cannot take it all
// now, zero with the error of a failed write (or of a closed
// connection). The caller serializes writes.
//
// Control, not Write: Write would refuse once the write deadline of an
// earlier blocking write has passed, and waits are not wanted anyway.
// Control keeps the descriptor open meanwhile.
func (e *Conn[T]) TryWrite(b []byte) (int, error) { return e.io.tryWrite(b) }

func (r *rawIO) tryWrite(b []byte) (int, error) {
	r.wbuf, r.wn, r.werr = b, 0, nil
	err := r.raw.Control(r.write)
	n, werr := r.wn, r.werr
	r.wbuf, r.werr = nil, nil
	if err == nil {
		err = werr
	}
	if err != nil {
		return 0, err // a failed write(2) writes nothing (and returns -1)
	}
	return n, nil
}

// ShardBuf is the read buffer of e's shard, for the Serve that answers
// e's session on that shard's goroutine (and for nothing that outlives
// the call).
func (e *Conn[T]) ShardBuf() []byte { return e.shard.rbuf }
