package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Raft's own log lines join Baton's: hashicorp/raft logs through hclog,
// which here writes JSON lines to a raftLog, which hands each one to the
// node's slog logger (one format, one handler, -log-format honoured), with
// "component=raft".
//
// A peer that is down makes Raft log an error per request to it, about ten
// a second. Those lines (peerFailures) are logged once per peer and
// message, then counted and summed up every raftRepeatEvery while they go
// on; the leader says in its own words which member is unreachable, for
// how long, and when it is back (health.go).

// peerFailures are the messages Raft logs per failed request to one peer,
// with the key that names the peer.
var peerFailures = map[string]string{
	"failed to heartbeat to":                  "peer",
	"failed to appendEntries to":              "peer",
	"failed to pipeline appendEntries":        "peer",
	"failed to start pipeline replication to": "peer",
	"failed to send snapshot to":              "peer",
	"failed to contact":                       "server-id",
	"failed to make requestVote RPC":          "target",
}

// raftRepeatEvery is how often a repeated peer failure is summed up.
const raftRepeatEvery = 30 * time.Second

// raftLog is the io.Writer behind Raft's hclog logger.
type raftLog struct {
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	partial  []byte
	repeated map[string]*repeat // by message and peer
}

type repeat struct {
	first, last, reported time.Time
	count                 int // since the last line logged
}

func newRaftLog(log *slog.Logger) *raftLog {
	return &raftLog{log: log.With("component", "raft"), now: time.Now, repeated: map[string]*repeat{}}
}

// Write takes hclog's output: whole JSON lines, one per call as hclog
// writes them (a partial line is kept for the next call).
func (l *raftLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := append(l.partial, p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		l.line(buf[:i])
		buf = buf[i+1:]
	}
	l.partial = append(l.partial[:0], buf...)
	return len(p), nil
}

// line logs one of hclog's JSON lines. l.mu must be held.
func (l *raftLog) line(b []byte) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			l.log.Warn(s)
		}
		return
	}
	msg, _ := m["@message"].(string)
	level := slog.LevelInfo
	switch strings.ToLower(fmt.Sprint(m["@level"])) {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	var attrs []any
	for k, v := range m {
		if !strings.HasPrefix(k, "@") {
			attrs = append(attrs, k, v)
		}
	}
	if msg == "no known peers, aborting election" {
		// A node waiting to be added: it says so in its own words, with
		// the command that adds it (removed.go).
		level = slog.LevelDebug
	}
	if key, ok := peerFailures[msg]; ok {
		peer := fmt.Sprint(m[key])
		if !l.first(msg+"\x00"+peer, &attrs) {
			return
		}
		level = slog.LevelWarn // the leader's health report carries the story
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}

// first reports whether a peer failure with key should be logged now: its
// first time (or the first after raftRepeatEvery of quiet), or a summary
// every raftRepeatEvery while it repeats, whose count it adds to attrs.
// l.mu must be held.
func (l *raftLog) first(key string, attrs *[]any) bool {
	now := l.now()
	r := l.repeated[key]
	if r == nil || now.Sub(r.last) >= raftRepeatEvery {
		l.repeated[key] = &repeat{first: now, last: now, reported: now}
		if len(l.repeated) > 1024 { // peers come and go: forget the quiet ones
			for k, o := range l.repeated {
				if now.Sub(o.last) >= raftRepeatEvery {
					delete(l.repeated, k)
				}
			}
		}
		return true
	}
	r.last = now
	r.count++
	if now.Sub(r.reported) < raftRepeatEvery {
		return false
	}
	*attrs = append(*attrs, "repeated", r.count, "for", now.Sub(r.first).Round(time.Second).String())
	r.reported, r.count = now, 0
	return true
}
