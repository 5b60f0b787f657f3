package baton

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// Defaults of a Client made without options.
const (
	// DefaultLease is the lease of a lock when no WithLease is given: a dead
	// holder is detected within 10s, and a live one that gets no
	// confirmation for 8s (a network fault, a pause) counts the lock lost.
	DefaultLease = 10 * time.Second
	// DefaultDialTimeout bounds one connection attempt to one address.
	DefaultDialTimeout = 5 * time.Second
)

// maxLease is the longest lease the protocol can carry: lease_ms is a u32.
const maxLease = math.MaxUint32 * time.Millisecond

// ReaderLimit is the limit of a reader's claim (WithShared): the largest
// the protocol carries, as close to "no limit" as a shared claim gets.
// Every reader of a name must give the same limit (the name's limit is set
// by its first shared session and checked against every later one), so it
// is one fixed number, the same in every Baton client and in baton run
// -shared, and readers of every kind agree without configuration.
const ReaderLimit = wire.MaxLimit

// An Option sets one setting. Given to New it sets the client's default for
// every lock; given to Acquire or Do it sets it for that lock only. When an
// option is given more than once, the last one wins.
type Option func(*settings)

type settings struct {
	lease       time.Duration
	maxHold     time.Duration // WithMaxHold; 0 for none
	logger      *slog.Logger  // WithLogger; nil for none
	owner       string
	noWait      bool
	dialTimeout time.Duration
	tlsConfig   *tls.Config
	waiting     func(position int)
	waitState   func(WaitState)                     // WithWaitStateFunc; nil for none
	retry       func(err error, wait time.Duration) // WithRetryFunc; nil for none
	// queueBehindSelf: WithQueueBehindSelf.
	queueBehindSelf bool
	normalClose     bool // WithNormalClose
	fastOpen        bool // WithTCPFastOpen
	// syn is the ACQUIRE that dialTCP sends in the SYN with Fast Open; set
	// for each dial of a claim's first connection, never for a resume.
	syn []byte
	// noResume: WithResume(false).
	noResume bool
	moved    func(Moved) // WithMovedFunc; nil for none
	// shared and limit are the claim's kind (WithLimit, WithShared): an
	// exclusive claim, or a shared one on a name of limit slots.
	shared bool
	limit  int
	// perName holds the options of ForName, by lock name. Copied on
	// write: settings are copied by value.
	perName map[string][]Option

	// Retries (WithBackoff, WithRetries, WithWaitForServer).
	backoffBase, backoffCap time.Duration
	retries                 int
	waitForServer           bool
	// The ops API, for Leader and Observe (observe.go).
	opsAddrs   []string
	adminToken string
}

// backoff is the wait before the nth retry: WithBackoff's, jittered.
func (s *settings) backoff(n int) time.Duration { return backoffWith(s.backoffBase, s.backoffCap, n) }

// WithBackoff sets the waits between Acquire's retries while it waits
// (after OVERLOADED, a broken connection, a server that did not answer):
// the first is base, each next one twice the last, up to limit; each is
// drawn from [d/2, d] so that clients refused together do not return
// together. Default 50ms and 2s. A NOT_LEADER during an election is
// followed faster, whatever these say.
func WithBackoff(base, limit time.Duration) Option {
	return func(s *settings) { s.backoffBase, s.backoffCap = base, limit }
}

// WithRetries bounds how many times in a row Acquire tries again after
// an attempt that failed for a reason worth a retry (see IsRetryable)
// before it returns that attempt's error; an attempt that the server
// answered starts the count again. 0, the default, bounds them only by
// the context.
func WithRetries(n int) Option { return func(s *settings) { s.retries = n } }

// WithWaitForServer(true) makes Acquire wait, within its context, for a
// server that is not up yet: an address that refuses the connection (or
// does not resolve) is tried again with the backoff, until one answers or
// the context ends. Without it, the default, Acquire fails at once when no
// server has answered the first attempt, which is how a wrong address is
// told from a server that went away. A TLS failure is never waited out.
func WithWaitForServer(wait bool) Option { return func(s *settings) { s.waitForServer = wait } }

// WithLease sets the lease: how long the server waits in silence before it
// declares the session dead and moves the lock. It is a failure detector,
// not a time limit: heartbeats keep a lock for as long as the work runs.
// Choose the smallest value above the pauses between you and the server.
// It is sent in whole milliseconds (the rest is dropped); from 1ms to
// about 49.7 days.
func WithLease(d time.Duration) Option { return func(s *settings) { s.lease = d } }

// WithMaxHold sets a maximum hold: d after the grant, the client ends the
// claim itself, as Release does, and the lock ends with an error wrapping
// ErrLockLost and ErrMaxHoldReached (the Lock's context is cancelled with
// it, Lock.Err and Release return it, and Do returns it). The lease only
// detects a dead holder; the maximum hold bounds a live one, such as work
// that hangs while its process still heartbeats. Lock.Err and
// Lock.ValidUntil count it, by the clock, like the lease's deadline. 0, the
// default, means no limit.
func WithMaxHold(d time.Duration) Option { return func(s *settings) { s.maxHold = d } }

// WithOwner sets the text that tells operators who holds or waits (shown by
// the ops API, never interpreted). Default: hostname:pid. At most 255 bytes
// of UTF-8 without control characters.
func WithOwner(owner string) Option { return func(s *settings) { s.owner = owner } }

// WithNoWait makes Acquire a try-lock: if the lock is held, it fails at once
// with ErrBusy instead of waiting in the queue.
func WithNoWait(noWait bool) Option { return func(s *settings) { s.noWait = noWait } }

// WithLimit makes the claim shared, on a name of n slots: a counting
// semaphore, held by at most n shared claims at once, granted in the order
// they came (1 <= n <= 65535; other values are refused with ErrBadRequest).
// Every shared claim of a name must give the same n while the name has
// shared sessions: a different one fails with an error matching
// ErrLimitMismatch (see LimitMismatchError), never retried. WithLimit and
// WithShared both set the claim's kind; the last one given wins. Without
// either, a claim is exclusive (sent with WithResume(false) as protocol
// version 1, byte for byte).
func WithLimit(n int) Option { return func(s *settings) { s.shared, s.limit = true, n } }

// WithShared(true) makes the claim a reader of a read/write lock: shared
// with other readers, with the limit ReaderLimit; a writer is an ordinary
// (exclusive) claim of the same name. The queue is strictly FIFO, so a
// writer waits for the readers that hold, and readers that come after a
// waiting writer wait behind it: a writer is never starved. WithShared(false)
// makes the claim exclusive again. WithLimit and WithShared both set the
// claim's kind; the last one given wins.
func WithShared(shared bool) Option {
	return func(s *settings) {
		s.shared, s.limit = shared, 0
		if shared {
			s.limit = ReaderLimit
		}
	}
}

// ForName applies opts to the claims of the lock name only, after the
// options given beside it: AcquireAll and DoAll take a set of names where
// each can be its own kind of claim (a reader of one, a writer of another),
// as in
//
//	c.DoAll(ctx, []string{"config", "data"}, work, baton.ForName("config", baton.WithShared(true)))
//
// Given to New, it sets the defaults of one name (a semaphore's limit)
// below the options of each call. AcquireAll refuses a ForName for a name
// not in its set (a misspelt name would silently change the claim's kind);
// Acquire and Do ignore those of other names.
func ForName(name string, opts ...Option) Option {
	return func(s *settings) {
		s.perName = maps.Clone(s.perName)
		if s.perName == nil {
			s.perName = make(map[string][]Option)
		}
		s.perName[name] = slices.Concat(s.perName[name], opts)
	}
}

// WithDialTimeout bounds each connection attempt to one address, TLS
// handshake included; 0 means no bound other than the context. Default
// DefaultDialTimeout.
func WithDialTimeout(d time.Duration) Option { return func(s *settings) { s.dialTimeout = d } }

// WithTLSConfig makes the client speak TLS with cfg; nil means plain TCP
// (the default). An empty ServerName is taken from the address dialled.
// For mutual TLS, put the client certificate in cfg.Certificates. A server
// that refuses the certificate fails Acquire with an error matching
// ErrUnauthorized, not retried.
func WithTLSConfig(cfg *tls.Config) Option { return func(s *settings) { s.tlsConfig = cfg } }

// WithWaitingFunc has f called with the place in the queue (1 is next) on
// every WAITING reply while Acquire waits: the first answer, and the reply
// to each heartbeat after it. After a reconnection the place starts again
// at the end of the queue. f runs on the session's heartbeat loop, so it
// must return at once (hand the value on without blocking); nil, the
// default, reports nothing. For progress displays such as baton run's.
func WithWaitingFunc(f func(position int)) Option { return func(s *settings) { s.waiting = f } }

// WithRetryFunc has f called each time Acquire, while it waits, gives up
// an attempt and will try again after wait: err says why (errors.Is with
// ErrNoAnswer for a server that accepted the connection and did not
// answer, or for none that accepted it; ErrShutdown, ErrNotLeader, a
// broken connection...). f runs on Acquire's goroutine, so it must return
// at once; nil, the default, reports nothing. For progress displays such
// as baton run's, which says when no server answers.
func WithRetryFunc(f func(err error, wait time.Duration)) Option {
	return func(s *settings) { s.retry = f }
}

// retried reports a retry to WithRetryFunc's f, if any.
func (s *settings) retried(err error, wait time.Duration) {
	if s.retry != nil {
		s.retry(err, wait)
	}
}

// WithQueueBehindSelf lets Acquire and Do take a place in the queue of a
// name that the same Client already holds or waits for; it is then granted
// only after that other Lock is released. Without it such a call fails at
// once with ErrAlreadyHeld (a WithNoWait call gets ErrBusy from the
// server instead): locks are not re-entrant, and a caller that waits for
// itself waits forever. Give it to hand a lock on between
// goroutines of one process.
func WithQueueBehindSelf(ok bool) Option { return func(s *settings) { s.queueBehindSelf = ok } }

// WithNormalClose(true) makes Release, and an Acquire that gives up its
// wait, close the connection normally (FIN) instead of with a reset (RST),
// the default.
//
// The reset is the faster release: the server sees it at once, as it sees
// a FIN, and the client's side of the connection is gone at once instead
// of lingering for a minute in TIME_WAIT, where thousands of them (one per
// claim) slow every new connection down as the kernel searches for a free
// port. The trade: a reset is sent once, while a FIN is retransmitted
// until acknowledged, so on a network that loses the reset the server
// learns of the release only at the end of the lease. The lock is then
// free later, never earlier: safety is the same. Choose the normal close
// on a lossy network where a lock sits idle for up to a lease after a
// lost release and that costs more than the ports. Ends that the client
// did not choose (an ERROR from the server, a broken connection, a lost
// confirmation) always close normally.
func WithNormalClose(normal bool) Option { return func(s *settings) { s.normalClose = normal } }

// WithTCPFastOpen(true) sends the ACQUIRE in the SYN (TCP Fast Open, Linux
// only), which saves the round trip of the TCP handshake on each claim
// once the kernel holds a Fast Open cookie for the server (the first
// connection to a server fetches one with an ordinary handshake). It needs
// bit 1 of the sysctl net.ipv4.tcp_fastopen on the client and bit 2 on the
// server, with baton serve -tcp-fastopen; otherwise connections fall back
// to the ordinary handshake by themselves. Off by default. On other
// platforms New and Acquire refuse it. (With TLS, the ClientHello rides in
// the SYN instead.)
func WithTCPFastOpen(on bool) Option { return func(s *settings) { s.fastOpen = on } }

// WithLogger has the client log to l: at Debug, connections, grants,
// releases and each resume attempt; at Info, reconnections while waiting,
// redirects by a node that is not the leader, a server that does not speak
// protocol version 3, the maximum hold, and each move of a claim ("moving
// the claim" when it begins, "claim moved" with where from, where to, the
// attempts and how long it took); at Warn, a request the server has not
// answered within a beat (lease/4), a move begun by silence, an attempt
// that no server answered (ErrNoAnswer: "no answer from the server", with
// the address and the wait, or "no server reachable" after one had
// answered), a refused resume, and the loss of a lock, with its cause; at
// Error, a loss that says a premise broke (ErrSuperseded, ErrMoved,
// ErrBadCredential). nil, the default, logs nothing. No record carries a
// claim's credential.
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

func defaultSettings() settings {
	return settings{
		lease:       DefaultLease,
		owner:       defaultOwner(),
		dialTimeout: DefaultDialTimeout,
		backoffBase: backoffBase,
		backoffCap:  backoffCap,
	}
}

// defaultOwner is hostname:pid, or pid:N when the host name is not fit to
// send.
func defaultOwner() string {
	pid := strconv.Itoa(os.Getpid())
	if host, err := os.Hostname(); err == nil {
		if owner := host + ":" + pid; wire.CheckOwner(owner) == nil {
			return owner
		}
	}
	return "pid:" + pid
}

func (s *settings) apply(opts []Option) {
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
}

// claimSettings returns the settings of one claim on name, when s are the
// client's: its defaults, its ForName(name) options, the call's opts, then
// the call's ForName(name) options. At each level the options for the name
// come after the general ones, and the call's after the client's.
func (s settings) claimSettings(name string, opts []Option) settings {
	own := s.perName[name]
	s.perName = nil
	s.apply(own)
	s.perName = nil // a ForName inside a ForName names nothing more
	s.apply(opts)
	s.apply(s.perName[name])
	return s
}

// check refuses what the server would refuse, and what the client cannot do.
func (s *settings) check() error {
	switch {
	case s.lease < time.Millisecond:
		return badRequest("lease %v must be at least 1ms", s.lease)
	case s.lease > maxLease:
		return badRequest("lease %v exceeds the protocol's maximum of %v", s.lease, maxLease)
	case s.dialTimeout < 0:
		return badRequest("dial timeout %v must not be negative", s.dialTimeout)
	case s.maxHold < 0:
		return badRequest("maximum hold %v must not be negative", s.maxHold)
	case s.backoffBase <= 0 || s.backoffCap < s.backoffBase:
		return badRequest("backoff from %v up to %v: the first wait must be positive and at most the longest", s.backoffBase, s.backoffCap)
	case s.retries < 0:
		return badRequest("retries %d must not be negative", s.retries)
	case s.fastOpen && !fastOpenSupported:
		return badRequest("TCP Fast Open is supported on Linux only")
	case s.shared && (s.limit < 1 || s.limit > wire.MaxLimit):
		return badRequest("limit %d must be from 1 to %d", s.limit, wire.MaxLimit)
	}
	if err := wire.CheckOwner(s.owner); err != nil {
		return asRequestError(err)
	}
	return nil
}

// asRequestError turns a refusal of wire's checks into a requestError.
func asRequestError(err error) error {
	if we, ok := err.(*wire.Error); ok {
		return &requestError{we}
	}
	return err
}

// claimFrames returns the ACQUIRE frames of a claim on name: of protocol
// version 3 (nil with WithResume(false)), and of the version a client
// without version 3 sends (1 for an exclusive claim, 2 for a shared one),
// byte for byte; the claim as a resume names it; and the lease as sent.
func (s *settings) claimFrames(name string) (v3, legacy []byte, resume wire.Acquire, lease time.Duration, err error) {
	if err := wire.CheckName(name); err != nil {
		return nil, nil, wire.Acquire{}, 0, asRequestError(err)
	}
	if err := s.check(); err != nil {
		return nil, nil, wire.Acquire{}, 0, err
	}
	a := wire.Acquire{
		Version: wire.Version,
		LeaseMs: uint32(s.lease / time.Millisecond),
		Name:    name,
		Owner:   s.owner,
	}
	if s.noWait {
		a.Flags = wire.FlagNoWait
	}
	if s.shared {
		// Only a shared claim needs version 2; an exclusive one stays the
		// version 1 frame that every server speaks.
		a.Version, a.Limit = wire.Version2, uint16(s.limit)
		a.Flags |= wire.FlagShared
	}
	if legacy, err = wire.AppendAcquire(nil, a); err != nil {
		// Unreachable after the checks above; keep the reason if not.
		return nil, nil, wire.Acquire{}, 0, fmt.Errorf("encode ACQUIRE: %w", err)
	}
	// Version 3 is laid out as version 2; a resume keeps the claim's kind,
	// limit, lease, name and owner, and never NOWAIT.
	resume = a
	resume.Version, resume.Flags = wire.Version3, a.Flags&wire.FlagShared
	if !s.shared {
		resume.Limit = 1
	}
	if !s.noResume {
		a3 := resume
		a3.Flags = a.Flags
		if v3, err = wire.AppendAcquire(nil, a3); err != nil {
			return nil, nil, wire.Acquire{}, 0, fmt.Errorf("encode ACQUIRE: %w", err)
		}
	}
	return v3, legacy, resume, time.Duration(a.LeaseMs) * time.Millisecond, nil
}
