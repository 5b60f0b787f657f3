package baton

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// link is one connection of a claim: the ACQUIRE's, or a resume attempt's.
// Its reader goroutine reads it; everything else about it is run's.
type link struct {
	conn net.Conn // the protocol's byte stream (TLS or TCP)
	raw  net.Conn // what to close: the TCP connection under conn
	addr string   // the address dialled, as the client's list spells it
	// number is the attempt number of the resume sent on it; 0 for the
	// connection of the claim's ACQUIRE.
	number uint16
	sentAt time.Time // when the resume was written (a reading of now)
	role   linkRole  // owned by run
}

// linkRole is what a connection is to its claim.
type linkRole uint8

const (
	// roleCur: the claim's connection, on which it heartbeats and is
	// confirmed.
	roleCur linkRole = iota + 1
	// roleAttempt: a resume attempt not answered yet.
	roleAttempt
	// roleLeft: a connection the claim has left (for a higher-numbered
	// one), or an answered attempt of a lower number than the claim's
	// connection. Nothing on it confirms; it stays open until its server
	// ends it, or the claim ends.
	roleLeft
	// roleClosed: closed by run; its reader's last event is ignored.
	roleClosed
)

type eventKind uint8

const (
	evWaiting   eventKind = iota + 1 // WAITING reply
	evAcquired                       // ACQUIRED reply (PUSH=0)
	evPush                           // ACQUIRED PUSH=1
	evError                          // ERROR frame; err is its *wire.Error
	evBroken                         // the read failed; err says how
	evViolation                      // a frame no server may send; err says which
)

// event is one frame, or the end of the stream, as read from link.
type event struct {
	link     *link
	kind     eventKind
	at       time.Time // when it was read (a reading of now): the end of a round trip
	token    uint64
	position uint32
	err      error
	// Version 3: the ticket (WAITING with TICKET), and the credential of a
	// frame that carries one (ACQUIRED with CREDENTIAL, WAITING with
	// TICKET). Never logged or printed: wire.Credential prints redacted.
	ticket     uint64
	withCred   bool
	generation uint32
	credential wire.Credential
}

// dialResult is the end of a resume attempt's dial.
type dialResult struct {
	addr      string
	conn, raw net.Conn
	err       error
}

// startReader starts l's reader.
func (s *claim) startReader(l *link) {
	s.workers.Add(1)
	go s.read(l)
}

// read is l's permanent reader: it hands every frame to run, until the
// stream ends, a frame ends the session, or run has ended.
func (s *claim) read(l *link) {
	defer s.workers.Done()
	br := bufio.NewReaderSize(l.conn, wire.MaxFrame)
	var buf [wire.MaxFrame]byte
	for first := true; ; first = false {
		ev := s.readFrame(l, br, &buf, first)
		if ev.kind == evPush && br.Buffered() > 0 {
			// Bytes came in behind the push. If they end the session (the
			// ERROR of a force-release or a shutdown that followed the
			// promotion at once, delivered together by a slow link), the
			// grant is never handed over: it was over before we saw it.
			// (A waiter of version 3 that then moves learns of its grant
			// from the answer to its resume.)
			next := s.readFrame(l, br, &buf, false)
			if next.kind >= evError {
				ev = next
			} else {
				if !s.emit(ev) {
					return
				}
				ev = next
			}
		}
		if !s.emit(ev) || ev.kind >= evError {
			return
		}
	}
}

// emit hands ev to run, and a confirmed promotion on the claim's first
// connection straight to Acquire. It reports false once run has ended.
func (s *claim) emit(ev event) bool {
	if ev.kind == evPush && ev.link == s.first && !s.moved.Load() && ev.at.Sub(s.base) < time.Duration(s.deadline.Load()) {
		// The promotion is confirmed (run checks the same deadline, and
		// ends the claim with a violation if a push comes twice). Once the
		// claim has begun to move, only run knows whether this connection
		// is still the claim's: a waiter past its deadline believes no
		// push there.
		s.sendGrant(ev.token, ev.at)
	}
	select {
	case s.events <- ev:
		return true
	case <-s.quit:
		return false
	}
}

// readFrame reads one frame of l, its first if first. The length is
// checked before the payload is read, so an oversize frame is refused
// unread.
func (s *claim) readFrame(l *link, r *bufio.Reader, buf *[wire.MaxFrame]byte, first bool) event {
	if _, err := io.ReadFull(r, buf[:wire.HeaderSize]); err != nil {
		return event{link: l, kind: evBroken, err: err}
	}
	if first && string(buf[:wire.HeaderSize]) == "HTT" {
		return s.httpAnswer(l, r)
	}
	h, err := wire.ParseHeader(buf[:wire.HeaderSize])
	if err != nil {
		return s.violation(l, "%v", errText(err))
	}
	p := buf[wire.HeaderSize : wire.HeaderSize+int(h.Length)]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the stream ended inside a frame
		}
		return event{link: l, kind: evBroken, err: err}
	}
	at := s.now()
	switch h.Type {
	case wire.TypeWaiting:
		if s.v3 {
			w, err := wire.DecodeWaitingV3(p)
			if err != nil {
				return s.violation(l, "%v", errText(err))
			}
			return event{link: l, kind: evWaiting, at: at, position: w.Position,
				ticket: w.Ticket, withCred: w.WithTicket, generation: w.Generation, credential: w.Credential}
		}
		pos, err := wire.DecodeWaiting(p)
		if err != nil {
			return s.violation(l, "%v", errText(err))
		}
		return event{link: l, kind: evWaiting, at: at, position: pos}
	case wire.TypeAcquired:
		var a wire.Acquired
		if s.v3 {
			a, err = wire.DecodeAcquiredV3(p)
		} else {
			a.Push, a.Token, err = wire.DecodeAcquired(p)
		}
		if err != nil {
			return s.violation(l, "%v", errText(err))
		}
		ev := event{link: l, kind: evAcquired, at: at, token: a.Token,
			withCred: a.WithCredential, generation: a.Generation, credential: a.Credential}
		if a.Push {
			ev.kind = evPush
		}
		return ev
	case wire.TypeError:
		e, err := wire.DecodeError(p)
		if err != nil {
			return s.violation(l, "%v", errText(err))
		}
		if e.Code == wire.CodeProtocol && strings.HasPrefix(e.Msg, opsPortRefusal) {
			return event{link: l, kind: evError, at: at, err: &wrongPortError{addr: l.addr, answer: e.Msg}}
		}
		return event{link: l, kind: evError, at: at, err: e}
	}
	return s.violation(l, "unexpected frame %v", h.Type)
}

// cleanEnd reports whether a read error is the end of the stream at a
// frame boundary (readFrame turns an end inside a frame into
// io.ErrUnexpectedEOF): under TLS, with or without close_notify, as
// crypto/tls returns io.EOF at a record boundary either way. A reset, a
// timeout, or any other error is not one.
func cleanEnd(err error) bool { return err == io.EOF || (err != nil && resumeAfterReset()) }

// httpAnswer is the end of a connection whose answer began "HTT": an HTTP
// server's status line, where a frame should be (a frame of that header
// would claim 21588 bytes, over the limit). Its first line, as far as it
// has come, names it.
func (s *claim) httpAnswer(l *link, r *bufio.Reader) event {
	line, _ := r.Peek(min(r.Buffered(), maxQuoted))
	if i := bytes.IndexAny(line, "\r\n"); i >= 0 {
		line = line[:i]
	}
	return event{link: l, kind: evViolation, err: &wrongPortError{addr: l.addr,
		answer: fmt.Sprintf("it answered in HTTP (%q), as an HTTP port such as Baton's ops port does", "HTT"+string(line))}}
}

// maxQuoted bounds what a message quotes of a server's answer.
const maxQuoted = 80

func (s *claim) violation(l *link, format string, args ...any) event {
	return event{link: l, kind: evViolation, err: &violationError{addr: l.addr, what: fmt.Sprintf(format, args...)}}
}

// errText is a decoder's complaint without the "baton: PROTOCOL" prefix,
// which would read as if the client had sent the bad frame.
func errText(err error) string {
	if we, ok := err.(*wire.Error); ok {
		return we.Msg
	}
	return err.Error()
}

// write writes b on l, bounded by until (a reading of now): a write stuck
// behind a frozen link ends no later than the claim's deadline.
func (s *claim) write(l *link, b []byte, until time.Time) error {
	// The connection's deadline is on time.Now's clock.
	l.conn.SetWriteDeadline(time.Now().Add(until.Sub(s.now())))
	_, err := l.conn.Write(b)
	return err
}
