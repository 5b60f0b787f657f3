// Package rawsock accepts TCP connections with accept4 itself, rather
// than through net.Listener.Accept, and serves each as a net.Conn (Conn)
// that reaches Go's runtime poller only when a goroutine first waits on
// it. On Linux only; elsewhere it is empty.
//
// A connection that is only ever read and written without waiting (an
// idle session served by an epoll set of its own) gains nothing from what
// net's accept adds to every connection: its registration with the
// runtime poller and its removal at the close (two epoll_ctl), a
// getsockname, a TCP_NODELAY setsockopt (the listener gives it instead:
// Linux copies it to the connections it accepts), a netFD and its
// finalizer. A Conn hands its descriptor to an *os.File, and so to the
// runtime poller, only at its first blocking Read or Write, deadline, or
// RawConn wait.
//
// It knows nothing of what the connections carry: the accept loop that
// uses an Acceptor (with its descriptor reserve and its back-off) is the
// server's.
package rawsock
