package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonlock/baton/internal/tokenstore"
)

// Config holds the server's settings. DefaultConfig gives the defaults of
// `baton serve`.
type Config struct {
	// IOTimeout bounds one I/O operation on a session: the first frame must
	// arrive within it after accept, a started frame must be completed within
	// it, and every write must complete within it. Must be positive.
	IOTimeout time.Duration
	// MaxSessions is the most sessions (holders and waiters) the server
	// carries at once; the ACQUIRE of one more is refused with ERROR
	// OVERLOADED. Connections that have not yet sent ACQUIRE do not count,
	// but past MaxSessions+1024 open connections new ones are closed at
	// once. Must be positive.
	MaxSessions int
	// MaxWaitersPerLock is the longest queue of one lock; a longer one is
	// refused with ERROR OVERLOADED. Must be positive.
	MaxWaitersPerLock int
	// NextToken returns fencing tokens: each greater than every earlier one,
	// across restarts, never 0 (see internal/tokenstore). Required.
	NextToken func() uint64
	// NoGrantFor starts the server in a crash-recovery grace period of
	// this length from New: no lock is granted before it ends; every
	// ACQUIRE queues (a NOWAIT one gets ERROR OVERLOADED), and at its end
	// the head of every queue is granted and pushed ACQUIRED. Measured on
	// Now's clock. Zero means no grace period; must not be negative.
	NoGrantFor time.Duration
	// Now reads the clock of every deadline that guards a lock: the
	// sessions' leases, the grace periods, the instants Replica.MayServe
	// is asked about. Nil is clock.Now, which counts a suspend of the machine
	// (CLOCK_BOOTTIME on Linux): Go's monotonic clock stops during one, and
	// a server that slept past its sessions' leases would confirm them when
	// it wakes. Its readings are compared only with each other, never with
	// time.Now. A cluster node sets it to its own (cluster.Node.Hooks), the
	// clock of its leader lease.
	Now func() time.Time
	// Leases, if not nil, records the lease of every ACQUIRE before it
	// enters the table, outside the server's mutex; an error refuses the
	// session with ERROR OVERLOADED. It is how the longest lease is made
	// durable for the grace period after a crash (tokenstore.Store). A
	// cluster node's Replica notes leases instead: set one or the other.
	// The idle poller's shard, which must not wait, notes with Leases only
	// a lease no longer than one it has let through already; a longer
	// one's ACQUIRE goes to a reader goroutine.
	Leases LeaseNoter
	// MaxLease, if positive, is the longest lease an ACQUIRE may ask for;
	// a longer one is refused with ERROR BAD_REQUEST. In a cluster the
	// lease bound is every crash failover's grace, so a lease is not only
	// its own client's business there.
	MaxLease time.Duration
	// ParkIdle serves sessions without reader goroutines where it can
	// (Linux, plain TCP): an epoll poller watches each connection from its
	// accept, takes its ACQUIRE, answers its heartbeats, and serves its
	// close (the handover's push included), reading and writing without
	// waiting. A parked session costs no goroutine stack, about two thirds
	// of its memory, and a claim costs no goroutine start; pipelined
	// heartbeats are read a turn at a time, at the poller's pace. Whatever
	// the poller does not do itself (a frame begun and not continued, a
	// write the socket cannot take at once, an ERROR to deliver) costs one
	// goroutine start: the session's reader, which parks it again when it
	// is idle. False keeps one reader goroutine per session for its whole
	// life.
	ParkIdle bool
	// ParkAfter is how long the first wait for a frame of a session whose
	// ACQUIRE went to a reader goroutine (see ParkIdle) keeps that reader
	// before the session parks: a session in that path is often busy, and
	// a park costs it two epoll_ctl and a goroutine start. Later waits
	// park at once. Zero parks at once; must not be negative.
	ParkAfter time.Duration
	// SendBuffer is the kernel send buffer of each session's socket, in
	// bytes (SO_SNDBUF; Linux doubles it). A session's output is a few
	// small frames, so a small buffer costs nothing; it bounds what a client
	// that never reads can make the kernel hold for it (up to tcp_wmem's
	// maximum, 4 MiB by default, when autotuned), and so how long such a
	// client takes to hit the io-timeout of a blocked write. Zero leaves
	// the system's default. Must not be negative.
	SendBuffer int
	// TCPFastOpen turns TCP Fast Open on for every listener Serve is given
	// (Linux only; Validate refuses it elsewhere): a client that asks for it
	// sends its ACQUIRE in the SYN and the server answers it in the first
	// round trip. The kernel must allow it too: bit 2 of the sysctl
	// net.ipv4.tcp_fastopen (Serve logs a warning when it is clear).
	TCPFastOpen bool
	// Replica, if not nil, makes the server one node of a cluster (package
	// cluster; see Replica): it starts serving no session (every ACQUIRE is
	// answered ERROR NOT_LEADER) until BeginTerm, a NOWAIT during the
	// failover grace gets ERROR BUSY instead of OVERLOADED, and EndTerm
	// ends every session. It notes the sessions' leases too.
	Replica Replica
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger

	// TLS, if not nil, makes every session speak TLS with this
	// configuration (TLSReloader.Config for reloadable files). The
	// handshake runs in the session's goroutine and must complete within
	// IOTimeout; the first frame then has IOTimeout of its own.
	TLS *tls.Config
	// ACL, if not nil, is the access rules every ACQUIRE must pass, by the
	// identities of the client's verified certificate; SetACL replaces it.
	// A refused ACQUIRE gets ERROR UNAUTHORIZED.
	ACL *ACL
	// MaxConnsPerIP caps the open connections from one source IP address;
	// more are closed at once. 0 means no cap.
	MaxConnsPerIP int
	// MaxConnsPerIdentity caps the open connections of one client
	// identity under mutual TLS: of the certificates that prove the same
	// identities (see Identities), whichever hosts they are used from. A
	// connection past it gets ERROR OVERLOADED after its handshake. 0
	// means no cap.
	MaxConnsPerIdentity int
	// ReserveFDs is how many file descriptors the protocol listener holds
	// in reserve: when the process has no descriptor free (EMFILE), an
	// accept gives up a spare and is served at once, whoever holds the rest
	// (the ops listener, files); spares are taken again as descriptors free
	// up. Zero holds none: such an accept then backs off and retries. Must
	// not be negative.
	ReserveFDs int
	// Resume gives the credentials of protocol version 3 (docs/protocol.md,
	// section 14) and keeps the records of claims' ends: a claim of version
	// 3 can be resumed only with it. Nil gives none: a version 3 ACQUIRE is
	// answered as one of version 2, and a resume is refused
	// (RESUME_REFUSED).
	Resume ResumeSource
	// ResumeMaxLease, if positive, is the longest lease of a claim that is
	// given a credential; a claim with a longer one behaves as one of
	// version 2 (a standalone server's -crash-grace-max: no claim it lists
	// is waited for longer after a restart). Zero means no cap; must not
	// be negative.
	ResumeMaxLease time.Duration
	// NextTicket returns the tickets of waiters (their places), as
	// NextToken does tokens: each greater than every earlier one, also
	// across restarts. Required with Resume.
	NextTicket func() uint64
	// Carried is what a standalone server starts with from its data
	// directory besides an empty table: the crash grace's claims of
	// earlier terms, and a planned handover's list. (A cluster's leader is
	// given it with BeginTerm.)
	Carried Carried

	// MetricsLockNames is how many lock names get series of their own in
	// baton_wait_seconds and baton_hold_seconds (label lock): the first
	// names seen, while later ones share lock="_other". Zero, the default,
	// publishes no lock name: the histograms then cover every lock, without
	// a label. /metrics is open, so names given series are public to whoever
	// reaches the ops listener. Must not be negative.
	MetricsLockNames int

	// PendingHandshakes caps the TLS handshakes in progress (see
	// HandshakeGate): past it, one of the source with the most in progress
	// (its oldest that has not sent its whole ClientHello, else its
	// oldest) is cut for the new one. Each costs up to about 32 KiB. Zero
	// means no cap; must not be negative.
	PendingHandshakes int
	// HandshakeRate is how many TLS handshakes a second one source of
	// unknown clients (SourcePrefixes) may begin computing, twice as many
	// at once; more wait for their turn within IOTimeout. A client is
	// known for an hour after a handshake with a verified certificate.
	// Zero means no limit; must not be negative.
	HandshakeRate float64
	// HandshakeCPU is the slots in which the handshakes of unknown
	// clients compute, shared with the process's other TLS listeners; nil
	// gives the server slots of its own (NewHandshakeCPU).
	HandshakeCPU *HandshakeCPU
	// SourcePrefixes say which addresses are one source for MaxConnsPerIP
	// and HandshakeRate; the zero value counts each address apart.
	SourcePrefixes SourcePrefixes
	// KeepFDs is how many descriptors the protocol listener's connections
	// never take, beside ReserveFDs and the server's own: those of the
	// rest of the process (the ops listener, Raft, files). Past the
	// open-file limit less all these, a new connection is closed at once,
	// after a TLS handshake in progress, if any, was cut for it. Zero
	// keeps none; must not be negative.
	KeepFDs int
}

// LeaseNoter records the leases of sessions before they enter the table:
// tokenstore.Store for a standalone server, so that the grace period after
// a crash covers every claim of the run.
type LeaseNoter interface {
	// NoteLease records that a session holds or waits with lease. It may
	// wait (for a disk write, a Raft round) when lease is longer than every
	// one noted before; an error refuses the session. In a cluster,
	// ErrNotLeader refuses it with NOT_LEADER.
	NoteLease(lease time.Duration) error
}

// Replica is how a node of a cluster plugs into its server (cluster.Node):
// it raises the replicated lease bound, says whether this node may still
// grant or confirm, hears when the server failed closed, and names the
// leader. The server asks it outside its mutex unless a method says
// otherwise.
type Replica interface {
	// NoteLease (LeaseNoter) raises the replicated lease bound to cover
	// lease, through Raft when it is longer than the committed bound.
	LeaseNoter
	// TryNoteLease is NoteLease for a caller that must not wait (the idle
	// poller's shard): it reports false, having recorded nothing, when
	// noting the lease would wait for a Raft round; the session's ACQUIRE
	// then goes to a reader goroutine.
	TryNoteLease(lease time.Duration) (bool, error)
	// MayServe is asked before every grant and every confirmation (the
	// answer to an ACQUIRE or a HEARTBEAT, a promotion), under the
	// server's mutex: may this node still grant or confirm at now? A
	// leader answers from its own lease, anchored at the send times a
	// quorum acknowledged. On false the server fails closed: it stops
	// serving, ends every session with ERROR NOT_LEADER, and calls
	// TermLost; until the next BeginTerm every ACQUIRE is refused.
	MayServe(now time.Time) bool
	// TermLost is called, under the server's mutex (it must not block or
	// call the server), when the server failed closed.
	TermLost()
	// AboutToServe reports whether this node, which does not serve yet, is
	// about to (a leader handing over chose it as its successor, or it won
	// an election and commits its epoch): a resume it reads meanwhile is
	// held, not answered NOT_LEADER, for up to IOTimeout (docs/protocol.md,
	// section 14, "Holding a resume").
	AboutToServe() bool
	// LeaderHint gives the message of ERROR NOT_LEADER: the leader's client
	// address, or "" while no leader is known.
	LeaderHint() string
}

// The standalone server's lease record.
var _ LeaseNoter = (*tokenstore.Store)(nil)

// leaseNoter is what notes the sessions' leases: a cluster node's Replica,
// else Leases; nil if neither is set.
func (c *Config) leaseNoter() LeaseNoter {
	if c.Replica != nil {
		return c.Replica
	}
	return c.Leases
}

// DefaultConfig returns the defaults of `baton serve`, without NextToken.
func DefaultConfig() Config {
	return Config{
		IOTimeout:         5 * time.Second,
		MaxSessions:       250000,
		MaxWaitersPerLock: 10000,
		ParkIdle:          true,
		ParkAfter:         50 * time.Millisecond,
		SendBuffer:        16 << 10,
		ReserveFDs:        32,
		// Far above the sessions one host (or a NAT gateway, or a tenant's
		// fleet sharing one certificate) holds or waits with at once, far
		// below what a server's descriptors allow (baton serve lowers both
		// to a quarter of the open-file limit).
		MaxConnsPerIP:       1024,
		MaxConnsPerIdentity: 4096,
		PendingHandshakes:   DefaultPendingHandshakes,
		HandshakeRate:       DefaultHandshakeRate,
		SourcePrefixes:      DefaultSourcePrefixes(),
	}
}

// Validate reports the first setting that cannot work, naming the field and
// its value.
func (c Config) Validate() error {
	switch {
	case c.IOTimeout <= 0:
		return fmt.Errorf("io-timeout (%v) must be positive", c.IOTimeout)
	case c.MaxSessions <= 0:
		return fmt.Errorf("max-sessions (%d) must be positive", c.MaxSessions)
	case c.MaxWaitersPerLock <= 0:
		return fmt.Errorf("max-waiters (%d) must be positive", c.MaxWaitersPerLock)
	case c.ParkAfter < 0:
		return fmt.Errorf("park-after (%v) must not be negative", c.ParkAfter)
	case c.SendBuffer < 0:
		return fmt.Errorf("send-buffer (%d) must not be negative", c.SendBuffer)
	case c.MaxLease < 0:
		return fmt.Errorf("max-lease (%v) must not be negative", c.MaxLease)
	case c.NoGrantFor < 0:
		return fmt.Errorf("no-grant-for (%v) must not be negative", c.NoGrantFor)
	case c.ReserveFDs < 0:
		return fmt.Errorf("reserve-fds (%d) must not be negative", c.ReserveFDs)
	case c.MetricsLockNames < 0:
		return fmt.Errorf("metrics-lock-names (%d) must not be negative", c.MetricsLockNames)
	case c.MaxConnsPerIP < 0:
		return fmt.Errorf("max-conns-per-ip (%d) must not be negative", c.MaxConnsPerIP)
	case c.MaxConnsPerIdentity < 0:
		return fmt.Errorf("max-conns-per-identity (%d) must not be negative", c.MaxConnsPerIdentity)
	case c.PendingHandshakes < 0:
		return fmt.Errorf("max-pending-handshakes (%d) must not be negative", c.PendingHandshakes)
	case c.HandshakeRate < 0:
		return fmt.Errorf("handshake-rate-per-ip (%v) must not be negative", c.HandshakeRate)
	case c.KeepFDs < 0:
		return fmt.Errorf("keep-fds (%d) must not be negative", c.KeepFDs)
	case c.SourcePrefixes.Validate() != nil:
		return c.SourcePrefixes.Validate()
	case c.TCPFastOpen && !fastOpenSupported:
		return fmt.Errorf("tcp-fastopen is supported on Linux only")
	case c.Leases != nil && c.Replica != nil:
		return fmt.Errorf("Leases and Replica are both set: a cluster node's Replica notes the leases")
	case c.NextToken == nil:
		return fmt.Errorf("NextToken is nil: the server needs a token source")
	case c.ResumeMaxLease < 0:
		return fmt.Errorf("resume-max-lease (%v) must not be negative", c.ResumeMaxLease)
	case c.Resume != nil && c.NextTicket == nil:
		return fmt.Errorf("NextTicket is nil: resumable claims need tickets")
	}
	return nil
}
