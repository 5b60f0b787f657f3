package baton

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/clock"
	"github.com/batonlock/baton/clients/go/wire"
)

// A Client takes locks from a Baton server. It holds no connection of its
// own (each Lock has one) and is safe for concurrent use; make one per
// process and keep it.
type Client struct {
	addrs []string
	set   settings
	// inUse counts, per lock name, the Acquire calls under way and the
	// Locks not yet ended, to refuse re-entrant use (ErrAlreadyHeld).
	inUseMu sync.Mutex
	inUse   map[string]*nameUse
	// last is the index of the address that last answered: new sessions
	// start there, so after a failover they go straight to the survivor.
	last atomic.Uint32
	// dial opens a connection: conn carries the protocol, raw is what to
	// close. Tests replace it.
	dial func(ctx context.Context, addr string, set *settings) (conn, raw net.Conn, err error)
	// now reads the clock of every lock's deadline: clock.Now, which
	// counts a suspend of the machine. Tests replace it.
	now func() time.Time
	// noV3At holds, by address, when it answered VERSION to protocol
	// version 3 (resume.go).
	v3mu   sync.Mutex
	noV3At map[string]time.Time
}

// New returns a client for the servers at addrs (host:port each), tried in
// order when one fails. The options set the defaults of every lock; Acquire
// and Do can override them per lock.
func New(addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, &opError{op: "baton.New", err: badRequest("no server address")}
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, &opError{op: "baton.New", err: badRequest("%v", err)}
		}
	}
	c := &Client{addrs: append([]string(nil), addrs...), set: defaultSettings(), dial: dialTCP, now: clock.Now}
	c.set.apply(opts)
	if err := c.set.check(); err != nil {
		return nil, &opError{op: "baton.New", err: err}
	}
	return c, nil
}

// Do takes the lock name, runs work while it is held, and releases it.
//
// work's context is the Lock's (see Lock.Context): it is cancelled when
// ownership is no longer confirmed (its cause says why), and also when ctx
// ends. Before each step that touches the guarded resource, work asks
// l.Err() (or ctx.Err()), which reads the clock: the cancellation itself
// comes from a goroutine, and after a pause of the process it can come
// after work's next step.
//
// Do returns work's error. If the lock was lost while work ran, it returns
// an error wrapping ErrLockLost and the cause, so that a loss cannot go
// unnoticed, with work's error wrapped too unless it is the cancellation
// that the loss caused (context.Canceled): a caller that takes
// context.Canceled for its own shutdown does not mistake a loss for it.
// Waiting is bounded by ctx, as for Acquire.
func (c *Client) Do(ctx context.Context, name string, work func(ctx context.Context, l *Lock) error, opts ...Option) error {
	if work == nil {
		return &opError{op: "acquire", name: name, err: errors.New("Do needs a work function, got nil")}
	}
	// The lock's context is derived from ctx itself: one cancellation, with
	// no goroutine between the loss and the work.
	l, err := c.acquire(ctx, name, ctx, opts, nil)
	if err != nil {
		return err
	}
	defer l.Release() // also if work panics
	werr := work(l.Context(), l)
	return workResult(werr, l.Release())
}

// workResult is what Do and DoAll return: the work's error werr, and lost,
// the error that ended the lock before its release (nil if none).
func workResult(werr, lost error) error {
	switch {
	case lost == nil:
		return werr
	case werr == nil:
		return lost
	case errors.Is(werr, ErrLockLost):
		return werr // work already passed the loss on
	case errors.Is(werr, context.Canceled):
		// The loss cancelled the work's context, and the work stopped
		// with ctx.Err(): told, not wrapped.
		return fmt.Errorf("%w (the work returned: %v)", lost, werr)
	}
	return fmt.Errorf("%w (and the work returned: %w)", lost, werr)
}

// Acquire takes the lock name: it connects, waits in the queue, and returns
// once the lock is held. Release the Lock when done.
//
// ctx bounds the whole wait; when it ends, the connection is closed at once,
// giving up the place in the queue. It does not bound the Lock: see
// Lock.Context.
//
// While waiting, Acquire handles server conditions itself: after SHUTDOWN or
// a broken connection it reconnects at once (to the next address if one
// fails), after OVERLOADED with a capped, jittered backoff, each time taking
// a new place at the end of the queue. In a cluster, a node that is not the
// leader answers NOT_LEADER with the leader's address: Acquire goes there at
// once if that address is one of the client's own (a few times in a row at
// most, so that two nodes with stale views cannot spin it), and otherwise
// tries the next address after a short jittered wait. If no address can be reached at all,
// it fails at once rather than hide a misconfiguration. Errors of the lock's
// rules (ErrBusy, ErrKicked) and client errors are returned, never retried.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, name, context.WithoutCancel(ctx), opts, nil)
}

// acquire is Acquire with the parent of the Lock's context, and a function
// to call when the lock, once granted, is lost (nil for none).
func (c *Client) acquire(ctx context.Context, name string, parent context.Context, opts []Option, onLost func(error)) (*Lock, error) {
	set := c.set.claimSettings(name, opts)
	return c.acquireWith(ctx, name, parent, set, onLost)
}

// acquireWith is acquire with the claim's settings made.
func (c *Client) acquireWith(ctx context.Context, name string, parent context.Context, set settings, onLost func(error)) (*Lock, error) {
	v3, legacy, resume, lease, err := set.claimFrames(name)
	if err != nil {
		return nil, &opError{op: "acquire", name: name, err: err}
	}
	// A NOWAIT call cannot wait on itself: the server answers it BUSY.
	if !c.reserve(name, set.shared, set.limit, set.queueBehindSelf || set.noWait) {
		return nil, &opError{op: "acquire", name: name, err: ErrAlreadyHeld}
	}
	l, err := c.acquireLoop(ctx, name, parent, &set, claimConfig{
		lease:   lease,
		acquire: v3,
		legacy:  legacy,
		resume:  resume,
		shared:  set.shared,
		limit:   set.limit,
		waiting: set.waitingFunc(),
		maxHold: set.maxHold,
		log:     set.logger,
		onLost:  onLost,
		onMoved: set.moved,
		now:     c.now,
		mv:      c.mover(&set),
	})
	if err != nil {
		c.unreserve(name, set.shared)
		return nil, err
	}
	l.s.onEnd(func() { c.unreserve(name, set.shared) })
	return l, nil
}

// nameUse is what this Client has of one name: claims under way or held.
type nameUse struct {
	exclusive int
	shared    int
	limit     int // the limit of the shared ones
}

// reserve counts one more use of name, unless this Client's own claims of
// the name would keep the new one from being granted and queueing behind
// itself was not asked for: any claim of its own, for an exclusive claim;
// an exclusive one, or as many shared ones as the limit, for a shared
// claim. A shared claim beside fewer of its own is let through: a process
// may hold several slots of one semaphore.
func (c *Client) reserve(name string, shared bool, limit int, queueBehindSelf bool) bool {
	c.inUseMu.Lock()
	defer c.inUseMu.Unlock()
	u := c.inUse[name]
	if u == nil {
		u = &nameUse{}
	}
	if !queueBehindSelf {
		switch {
		case !shared && u.exclusive+u.shared > 0:
			return false
		case shared && (u.exclusive > 0 || (u.shared >= limit && u.limit == limit)):
			return false
		}
	}
	if shared {
		if u.shared == 0 {
			u.limit = limit
		}
		u.shared++
	} else {
		u.exclusive++
	}
	if c.inUse == nil {
		c.inUse = make(map[string]*nameUse)
	}
	c.inUse[name] = u
	return true
}

// unreserve ends one use of name: an Acquire that failed, or a Lock's
// claim that ended.
func (c *Client) unreserve(name string, shared bool) {
	c.inUseMu.Lock()
	defer c.inUseMu.Unlock()
	u := c.inUse[name]
	if u == nil {
		return
	}
	if shared {
		u.shared--
	} else {
		u.exclusive--
	}
	if u.exclusive <= 0 && u.shared <= 0 {
		delete(c.inUse, name)
	}
}

// acquireLoop connects, waits and reconnects until the lock is granted, the
// claim fails for good, or ctx ends. (A claim of version 3 that moves, to
// another server or the same one, is still the same claim: the loop sees
// nothing of it.)
func (c *Client) acquireLoop(ctx context.Context, name string, parent context.Context, set *settings, cfg claimConfig) (*Lock, error) {
	var (
		idx      = int(c.last.Load()) % len(c.addrs)
		reached  bool  // some server was reached during this call
		failures int   // failed attempts since the server last answered
		lastErr  error // why the last attempt failed
		// redirects counts NOT_LEADER answers since a server last queued
		// us: while it is within budget a hint is followed at once.
		redirects int
	)
	for {
		if ctx.Err() != nil {
			return nil, acquireCtxError(ctx, name, lastErr, 0)
		}
		s, err := c.connect(ctx, parent, set, &idx, name, cfg)
		if err != nil {
			if ctxEnded(ctx) {
				return nil, acquireCtxError(ctx, name, lastErr, 0)
			}
			if !reached && (!set.waitForServer || isTLSError(err)) {
				// No server has ever answered: a wrong address fails at
				// once, unless the caller waits for a server to come up.
				return nil, &opError{op: "acquire", name: name, err: err}
			}
			lastErr = &noAnswerError{err: err}
			failures++
			if set.retries > 0 && failures > set.retries {
				return nil, &opError{op: "acquire", name: name, err: fmt.Errorf("%w (gave up after %d retries, WithRetries)", lastErr, set.retries)}
			}
			wait := set.backoff(failures)
			logAt(set.logger, slog.LevelWarn, "baton: no server reachable; trying again",
				slog.String("lock", name), slog.Any("err", err), slog.Duration("after", wait))
			set.retried(lastErr, wait)
			if !sleep(ctx, wait) {
				return nil, acquireCtxError(ctx, name, lastErr, 0)
			}
			continue
		}
		reached = true

		l, err := c.await(ctx, s, lastErr)
		if l != nil || err != nil {
			return l, err
		}
		// The claim ended while waiting; s.err says why.
		if s.v3 && !s.replied && errors.Is(s.err, ErrVersion) {
			// A server older than protocol version 3: the same claim as
			// version 1 or 2 at once, on a new connection to the same
			// address, which is then sent those for a while.
			c.noV3(s.addr)
			logAt(set.logger, slog.LevelInfo, "baton: the server does not speak protocol version 3; its claims end with their connections",
				attrLock(name), attrAddr(s.addr), slog.Duration("for", v3Retry))
			continue
		}
		lastErr = s.err
		if i, ok := c.index(s.addr); ok {
			idx = i // where the claim was last, if it moved
		}
		atOnce, retry := retryable(s.err)
		if !retry {
			return nil, &opError{op: "acquire", name: name, err: limitMismatch(s.err, set.limit)}
		}
		if s.replied {
			failures, redirects = 0, 0
		}
		failures++
		if errors.Is(s.err, ErrShutdown) || errors.Is(s.err, ErrUnconfirmed) || errors.Is(s.err, ErrNoAnswer) {
			// Going away, or accepting but not answering (a stopped or
			// hung node: the kernel still completes the handshake). Try
			// the next address first, or the same one would hold us.
			idx = (idx + 1) % len(c.addrs)
		}
		if hint, ok := notLeaderHint(s.err); ok {
			// A follower, or a leader that just lost its term. Follow its
			// hint if it names one of our addresses, at once while the
			// redirect budget lasts; otherwise try the next address. A
			// hint outside the list is never followed: the list is what
			// the operator trusts.
			next, known := c.index(hint)
			redirects++
			logAt(set.logger, slog.LevelInfo, "baton: not the leader",
				slog.String("lock", name), slog.String("addr", s.addr), slog.String("leader", hint),
				slog.Bool("leader_known", known))
			if known && next != idx && redirects <= c.redirectBudget() {
				idx = next
				continue
			}
			if known && next != idx {
				idx = next
			} else {
				idx = (idx + 1) % len(c.addrs)
			}
			// An election takes a few hundred milliseconds: wait about
			// that, not the long backoff meant for an overloaded server.
			wait := jitter(min(backoffBase<<min(redirects, 8), electionBackoffCap))
			set.retried(s.err, wait)
			if !sleep(ctx, wait) {
				return nil, acquireCtxError(ctx, name, lastErr, 0)
			}
			continue
		}
		if set.retries > 0 && failures > set.retries {
			return nil, &opError{op: "acquire", name: name, err: fmt.Errorf("%w (gave up after %d retries, WithRetries)", s.err, set.retries)}
		}
		var wait time.Duration
		if !atOnce || failures > 1 {
			wait = set.backoff(failures)
		}
		if errors.Is(s.err, ErrNoAnswer) {
			// Said louder than a reconnection: nothing may come of it.
			logAt(set.logger, slog.LevelWarn, "baton: no answer from the server; trying again",
				slog.String("lock", name), slog.String("addr", s.addr), slog.Any("err", s.err), slog.Duration("after", wait))
		} else {
			logAt(set.logger, slog.LevelInfo, "baton: session ended while waiting; reconnecting",
				slog.String("lock", name), slog.String("addr", s.addr), slog.Any("err", s.err), slog.Duration("after", wait))
		}
		set.retried(s.err, wait)
		if wait > 0 && !sleep(ctx, wait) {
			return nil, acquireCtxError(ctx, name, lastErr, 0)
		}
	}
}

// await waits for the session to be granted, to end, or for ctx. It returns
// (nil, nil) when the session ended while waiting and Acquire may try again.
// lastErr is why the previous attempt failed, for the error if ctx ends.
func (c *Client) await(ctx context.Context, s *claim, lastErr error) (*Lock, error) {
	select {
	case token := <-s.granted:
		if ctx.Err() != nil {
			s.close()
			<-s.done
			return nil, acquireCtxError(ctx, s.name, lastErr, 0)
		}
		if s.ctx.Err() != nil {
			// Lost as it was granted (a push read just before the deadline
			// ran out): never hand over a Lock that is dead already.
			<-s.done
			return nil, s.err
		}
		return &Lock{name: s.name, token: token, s: s}, nil
	case <-s.done:
		if s.held {
			// Granted and lost before we could hand it over: report it.
			return nil, s.err
		}
		return nil, nil
	case <-ctx.Done():
		s.close()
		<-s.done
		var na *noAnswerError
		if !s.replied && !errors.As(lastErr, &na) {
			// No answer so far, and no earlier attempt that tells more
			// (a whole attempt's silence says which bound ran out).
			lastErr = &noAnswerError{addr: s.addr, waited: s.endedAt.Sub(s.base)}
		}
		return nil, acquireCtxError(ctx, s.name, lastErr, s.position)
	}
}

// retryable says whether a session that ended while waiting may be tried
// again, and whether at once (the server went away) or after a backoff.
func retryable(err error) (atOnce, retry bool) {
	var we *wire.Error
	if errors.As(err, &we) {
		switch {
		case we.Code == wire.CodeShutdown:
			return true, true
		case we.Code == wire.CodeLeaseExpired:
			// Our heartbeats did not get through; we still want the lock.
			return true, true
		case we.Code == wire.CodeResumeRefused:
			// The waiter's place could not be carried over: a new place.
			return true, true
		case we.Code.Class() == wire.ClassServer:
			return false, true // OVERLOADED, and server conditions not yet named
		}
		return false, false
	}
	var ce *connError
	switch {
	case errors.Is(err, ErrNoAnswer):
		return false, true // after a backoff: the server may be stuck for long
	case errors.Is(err, ErrUnconfirmed), errors.As(err, &ce):
		return true, true
	}
	return false, false
}

// notLeaderHint returns the leader's address that a NOT_LEADER error
// carries (empty while no leader is known), and whether err is one.
func notLeaderHint(err error) (string, bool) {
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotLeader {
		return "", false
	}
	return we.Msg, true
}

// index returns the position of addr in the client's address list,
// comparing host and port as the resolver would not: literally, after
// normalising the form ("[::1]:7070" and "::1" spelled alike).
func (c *Client) index(addr string) (int, bool) {
	if addr == "" {
		return 0, false
	}
	want := normalAddr(addr)
	for i, a := range c.addrs {
		if normalAddr(a) == want {
			return i, true
		}
	}
	return 0, false
}

func normalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}

// redirectBudget is how many NOT_LEADER hints in a row are followed at
// once: enough to go round the list twice during an election, few enough
// that two nodes naming each other (stale views) cannot spin the client.
func (c *Client) redirectBudget() int { return 2 * len(c.addrs) }

// connect dials the addresses from *idx on, once each, and starts a claim
// on the first that answers; *idx is left on it. The claim is sent as
// version 3 unless the address answered VERSION to it lately.
func (c *Client) connect(ctx, parent context.Context, set *settings, idx *int, name string, cfg claimConfig) (*claim, error) {
	var errs []error
	for i := range c.addrs {
		j := (*idx + i) % len(c.addrs)
		frame, v3 := cfg.legacy, false
		if cfg.acquire != nil && c.speaksV3(c.addrs[j]) {
			frame, v3 = cfg.acquire, true
		}
		dset := set
		if set.fastOpen {
			dset = new(settings)
			*dset = *set
			dset.syn = frame
		}
		conn, raw, err := c.dial(ctx, c.addrs[j], dset)
		if err != nil {
			logAt(set.logger, slog.LevelDebug, "baton: dial failed",
				slog.String("lock", name), slog.String("addr", c.addrs[j]), slog.Any("err", err))
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		logAt(set.logger, slog.LevelDebug, "baton: connected", slog.String("lock", name), slog.String("addr", c.addrs[j]))
		*idx = j
		c.last.Store(uint32(j))
		return startClaim(parent, conn, raw, c.addrs[j], name, frame, v3, cfg), nil
	}
	return nil, errors.Join(errs...)
}

func dialTCP(ctx context.Context, addr string, set *settings) (conn, raw net.Conn, err error) {
	if set.dialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, set.dialTimeout)
		defer cancel()
	}
	d := dialer(set)
	raw, err = d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if !set.normalClose {
		resetOnClose(raw)
	}
	if set.tlsConfig == nil {
		if set.fastOpen && set.syn != nil {
			return sendInSYN(ctx, raw, set.syn) // dial.go
		}
		return raw, raw, nil
	}
	cfg := set.tlsConfig.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		if isRemoteAlert(err) {
			return nil, nil, &tlsRefusedError{addr: addr, err: err}
		}
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.EOF) {
			// The network failed during the handshake (a timeout, a
			// server that went away): a reason to try again, not TLS's.
			return nil, nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		return nil, nil, &tlsError{addr: addr, err: err}
	}
	// Closing raw, not tc, releases at once: tls.Conn.Close first tries to
	// send close_notify, which a stalled link can hold up for seconds.
	return tc, raw, nil
}

// Reconnection backoff after OVERLOADED or repeated failures: doubling from
// backoffBase, capped at backoffCap (WithBackoff sets both), each wait
// drawn from [d/2, d] so that clients refused together do not return
// together.
const (
	backoffBase = 50 * time.Millisecond
	backoffCap  = 2 * time.Second
)

// electionBackoffCap caps the wait between NOT_LEADER answers without a
// usable hint: about one election timeout of the default Raft timers.
const electionBackoffCap = 400 * time.Millisecond

func backoff(n int) time.Duration { return backoffWith(backoffBase, backoffCap, n) }

// backoffWith is the wait before the nth retry, doubling from base up to
// limit, jittered.
func backoffWith(base, limit time.Duration, n int) time.Duration {
	d := limit
	if n >= 1 && n < 32 && base<<(n-1) > 0 {
		d = min(base<<(n-1), limit)
	}
	return jitter(d)
}

// jitter draws a wait from [d/2, d].
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// ctxEnded reports whether ctx has ended or its deadline has passed: a dial
// cut short by the deadline can return before ctx.Done is closed, and its
// "i/o timeout" says less than the attempt before it.
func ctxEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// acquireCtxError is the end of a wait by ctx. It wraps ctx.Err() and the
// cause; the last failure and the place in the queue are told, not wrapped,
// so that errors.Is reports why Acquire returned, not what it had survived.
// One failure is part of why: a wait that ended with no place in a queue
// because no server answered wraps ErrNoAnswer too. Call it only once
// ctxEnded(ctx).
func acquireCtxError(ctx context.Context, name string, last error, position uint32) error {
	<-ctx.Done() // past its deadline, the timer closing Done may lag a moment
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	var na *noAnswerError
	if position == 0 && errors.As(last, &na) {
		return &opError{op: "acquire", name: name, err: fmt.Errorf("%w (%w)", err, last)}
	}
	switch {
	case position > 0 && last != nil:
		err = fmt.Errorf("%w (waiting at position %d; earlier attempt: %v)", err, position, last)
	case position > 0:
		err = fmt.Errorf("%w (waiting at position %d)", err, position)
	case last != nil:
		err = fmt.Errorf("%w (last attempt: %v)", err, last)
	}
	return &opError{op: "acquire", name: name, err: err}
}
