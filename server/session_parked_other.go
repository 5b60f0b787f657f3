//go:build !linux

package server

import "syscall"

// Elsewhere than Linux every session keeps its reader goroutine: the idle
// poller is built on epoll.
type idlePoller struct{}

func (c *session) initRaw(syscall.RawConn) {}

// writeNow is never called: no session has a raw connection here.
func (c *session) writeNow() bool { return false }

func newIdlePoller(*Server) (*idlePoller, error) { return nil, nil }

func (p *idlePoller) park(*session) bool     { return false }
func (p *idlePoller) adopt(*session) bool    { return false }
func (p *idlePoller) unpark(*session) bool   { return false }
func (p *idlePoller) run()                   {}
func (p *idlePoller) stop()                  {}
func (p *idlePoller) isParked(*session) bool { return false }
func (p *idlePoller) readersStarted() uint64 { return 0 }
