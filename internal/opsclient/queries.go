package opsclient

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// The questions the operator commands ask beyond one request: each says
// how it reads the answers.

// LeaderView is the cluster as its leader sees it, with the members'
// health that only the leader knows (a follower sends the question on);
// ok is false if no leader answered with it.
func (c *Client) LeaderView(ctx context.Context) (v Cluster, ok bool) {
	b, err := c.Send(ctx, http.MethodGet, "/v1/cluster?view=leader", nil)
	if err != nil {
		return v, false
	}
	if json.Unmarshal(b, &v) != nil || v.Healthy == nil {
		return v, false
	}
	return v, true
}

// AwaitMember asks the leader's view until member id has answered the
// leader, for at most within, and returns the last view (last if none
// came).
func (c *Client) AwaitMember(ctx context.Context, id string, last Cluster, within time.Duration) Cluster {
	deadline := time.Now().Add(within)
	for {
		if last.Answered(id) || time.Now().After(deadline) || ctx.Err() != nil {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(250 * time.Millisecond):
		}
		if lv, ok := c.LeaderView(ctx); ok {
			last = lv
		}
	}
}

// SessionLock is the name of the lock that session id holds or waits for,
// and how many other sessions hold it; "" if none is found.
func (c *Client) SessionLock(ctx context.Context, id string) (name string, otherHolders int) {
	body, err := c.Do(ctx, http.MethodGet, "/v1/locks")
	if err != nil {
		return "", 0
	}
	var ls Locks
	if json.Unmarshal(body, &ls) != nil {
		return "", 0
	}
	for _, l := range ls.Locks {
		holders := l.AllHolders()
		for _, h := range holders {
			if h.ID == id {
				return l.Name, len(holders) - 1
			}
		}
		for _, w := range l.Waiters {
			if w.ID == id {
				return l.Name, len(holders)
			}
		}
	}
	return "", 0
}
