package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/opsview"
	"github.com/batonlock/baton/internal/tokenfile"
)

// Exit codes of the operator commands, besides exitOK, exitFailure (any
// other error: unauthorized, unreachable, 409) and exitUsage.
const (
	exitNotFound = 3 // the lock or session does not exist (404)
)

// defaultOpsAddr is -ops-addr's default.
const defaultOpsAddr = opsclient.DefaultAddr

// adminEnv holds the admin token itself, for when no file is given.
const adminEnv = "BATON_ADMIN_TOKEN"

// adminOptions are the flags every operator command has.
type adminOptions struct {
	opsAddr        string
	adminTokenFile string
	json           bool
	tls            clientTLSOptions
	session        string // release -session: the one holder to end
}

func newAdminFlags(name string, o *adminOptions) *flag.FlagSet {
	fs := newFlagSet(name)
	fs.StringVar(&o.opsAddr, "ops-addr", defaultOpsAddr, "`host:port` (or http[s]://host:port) of the server's ops API; a comma-separated list for the nodes of a cluster, tried in order")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "`file` with the bearer token of the ops API (else $BATON_ADMIN_TOKEN)")
	fs.BoolVar(&o.json, "json", false, "print the API's JSON answer instead of text")
	if name == "release" {
		fs.StringVar(&o.session, "session", "", "force-release this one holder (a session `id`, as 'baton locks NAME' lists it) instead of every holder of a lock")
	}
	o.tls.register(fs, "ops listener")
	return fs
}

const adminHelp = `The admin token: the file of -admin-token-file (or $BATON_ADMIN_TOKEN_FILE)
if given, else the token itself in $BATON_ADMIN_TOKEN. A server without
-admin-token-file needs none.

Any -tls-* flag, or an https:// -ops-addr, makes the request over HTTPS:
-tls-ca is the CA of the ops listener's certificate, -tls-cert and -tls-key
the client certificate a server with -ops-tls-client-ca requires.

Exit status: 0 success, 1 an error (unauthorized, the ops API cannot be
reached, a refused action), 2 usage error, 3 no such lock or session.
`

func locksCommand() *command {
	return &command{
		name:    "locks",
		summary: "list the locks that are held or waited for",
		usage:   "baton locks [flags] [NAME]",
		flags:   func() *flag.FlagSet { return newAdminFlags("locks", new(adminOptions)) },
		help: `Without NAME, one line per holder of every lock that has a holder or
waiters: the lock's name, the holder's owner text, session, kind of claim
(exclusive, or shared: a slot of a semaphore, a reader of a read/write
lock) and fencing token, how long it has held, the lock's slots in use
against its limit (3/5; an exclusive claim holds a name alone, as a
semaphore of 1: 1/1), and how many wait. A lock that only has waiters
gets one line without a holder. With NAME, that lock, a line on each
holder (for baton release -session), the limit in force, and then its
queue in order, with each waiter's session id (for baton kick). -json
prints the ops API's JSON (GET /v1/locks or /v1/locks/{name}) for scripts.

` + adminHelp + `
Examples:
  baton locks
  baton locks jobs/nightly
  baton locks -json | jq -r '.locks[].name'
  BATON_ADMIN_TOKEN=$(cat /etc/baton/admin-token) baton locks -ops-addr baton1:7071
`,
		run: runLocks,
	}
}

func releaseCommand() *command {
	return &command{
		name:    "release",
		summary: "force-release a lock: take it from its holders",
		usage:   "baton release [flags] NAME | baton release [flags] -session ID",
		flags:   func() *flag.FlagSet { return newAdminFlags("release", new(adminOptions)) },
		help: `baton release NAME takes the lock from every holder: each holder's session
gets ERROR FORCE_RELEASED and ends, then the queue moves at once: the next
waiters are granted the lock, with larger fencing tokens. A lock has several
holders when its claims are shared (a semaphore, the readers of a
read/write lock): one line is printed for each.

baton release -session ID takes it from that one holder alone, whatever
its lock; the other holders keep theirs, and the slot it frees goes to the
next waiter that may hold. The session ids are in 'baton locks NAME'.

A holder started by baton run has its command stopped (exit 77). The
holder's work may still be running for a moment: only the fencing token
protects the resource then.

` + adminHelp + `
Examples:
  baton release jobs/nightly
  baton release -ops-addr baton1:7071 -admin-token-file /etc/baton/admin-token deploy/web
  baton locks pool              # find the holder's SESSION
  baton release -session 17     # end that holder only
`,
		run: runRelease,
	}
}

func kickCommand() *command {
	return &command{
		name:    "kick",
		summary: "remove a waiter from a lock's queue",
		usage:   "baton kick [flags] SESSION",
		flags:   func() *flag.FlagSet { return newAdminFlags("kick", new(adminOptions)) },
		help: `SESSION is a session id as 'baton locks NAME' lists it. The waiter gets
ERROR KICKED and leaves the queue (baton run then exits 1). A holder cannot
be kicked: use baton release -session SESSION (that holder), or baton
release NAME (every holder).

` + adminHelp + `
Examples:
  baton locks jobs/nightly     # find the waiter's SESSION
  baton kick 17
`,
		run: runKick,
	}
}

// parseAdmin reads the flags and the one positional argument (or none if
// optional) of an operator command. When ok is false the command must
// return code.
func parseAdmin(s *sys, c *command, args []string, what string, optional bool) (o adminOptions, arg string, ops *opsclient.Client, code int, ok bool) {
	fs := newAdminFlags(c.name, &o)
	pos, code, ok := parseInterspersed(s, c, fs, args)
	if !ok {
		return o, "", nil, code, false
	}
	switch {
	case len(pos) > 1:
		return o, "", nil, usageError(s, c.name, fmt.Sprintf("unexpected argument %q: give one %s", pos[1], what)), false
	case len(pos) == 0 && !optional:
		return o, "", nil, usageError(s, c.name, "no "+what+" given"), false
	case len(pos) == 1:
		arg = pos[0]
		if arg == "" {
			return o, "", nil, usageError(s, c.name, what+" is empty"), false
		}
	}
	if err := opsclient.CheckAddrs(o.opsAddr); err != nil {
		return o, "", nil, usageError(s, c.name, err.Error()), false
	}
	if err := o.tls.check(); err != nil {
		return o, "", nil, usageError(s, c.name, err.Error()), false
	}
	if o.tls.enabled() && strings.Contains(o.opsAddr, "http://") {
		return o, "", nil, usageError(s, c.name, fmt.Sprintf("ops-addr %s is plain http, but -tls-* flags are given: use https:// or drop them", o.opsAddr)), false
	}
	token, err := adminToken(s, o.adminTokenFile)
	if err != nil {
		return o, "", nil, failure(s, c.name, err.Error()), false
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		return o, "", nil, failure(s, c.name, err.Error()), false
	}
	return o, arg, opsclient.New(o.opsAddr, token, tlsCfg), exitOK, true
}

func runLocks(ctx context.Context, s *sys, c *command, args []string) int {
	o, name, ops, code, ok := parseAdmin(s, c, args, "lock name", true)
	if !ok {
		return code
	}
	path := "/v1/locks"
	if name != "" {
		path += "/" + url.PathEscape(name)
	}
	body, err := ops.Do(ctx, http.MethodGet, path)
	if err != nil {
		return adminFailed(s, c.name, err)
	}
	if o.json {
		s.stdout.Write(body)
		return exitOK
	}
	if name != "" {
		var l opsclient.Lock
		if err := json.Unmarshal(body, &l); err != nil {
			return failure(s, c.name, fmt.Sprintf("the ops API at %s sent bad JSON: %v", ops.Addr(), err))
		}
		opsview.Grace(s.stdout, l.GraceRemainingMS)
		opsview.Lock(s.stdout, l)
		return exitOK
	}
	var ls opsclient.Locks
	if err := json.Unmarshal(body, &ls); err != nil {
		return failure(s, c.name, fmt.Sprintf("the ops API at %s sent bad JSON: %v", ops.Addr(), err))
	}
	opsview.Grace(s.stdout, ls.GraceRemainingMS)
	if len(ls.Locks) == 0 {
		fmt.Fprintln(s.stderr, "baton locks: no lock is held or waited for")
		return exitOK
	}
	opsview.Locks(s.stdout, ls.Locks)
	return exitOK
}

func runRelease(ctx context.Context, s *sys, c *command, args []string) int {
	o, name, ops, code, ok := parseAdmin(s, c, args, "lock name", true)
	if !ok {
		return code
	}
	switch {
	case o.session != "" && name != "":
		return usageError(s, c.name, fmt.Sprintf("give a lock name (every holder) or -session ID (one holder), not both: %q and -session %s", name, o.session))
	case o.session != "":
		return releaseSession(ctx, s, c, o, ops)
	case name == "":
		return usageError(s, c.name, "no lock name given (or -session ID for one holder)")
	}
	body, err := ops.Do(ctx, http.MethodPost, "/v1/locks/"+url.PathEscape(name)+"/release")
	if err != nil {
		return adminFailed(s, c.name, err)
	}
	// A lock with several holders (protocol v2) answers {"released": [...]}.
	var several struct {
		Released []opsclient.Session `json:"released"`
	}
	if !o.json && json.Unmarshal(body, &several) == nil && len(several.Released) > 0 {
		for _, sv := range several.Released {
			opsview.Released(s.stdout, name, sv)
		}
		return exitOK
	}
	sv, code, done := sessionAnswer(s, c, ops, o.json, body)
	if done {
		return code
	}
	opsview.Released(s.stdout, name, sv)
	return exitOK
}

// releaseSession force-releases the one holder o.session.
func releaseSession(ctx context.Context, s *sys, c *command, o adminOptions, ops *opsclient.Client) int {
	id := o.session
	if code, ok := checkSessionID(s, c, id); !ok {
		return code
	}
	// The answer does not name the lock: it is looked up first, for the
	// summary line only.
	name, _ := ops.SessionLock(ctx, id)
	sv, code, done := postSession(ctx, s, c, o, ops, id, "release", func() string {
		if name == "" {
			return fmt.Sprintf("session %s waits for its lock and holds nothing; remove it from the queue with 'baton kick %s'", id, id)
		}
		return fmt.Sprintf("session %s waits for lock %s and holds nothing; remove it from the queue with 'baton kick %s'", id, human.Escape(name), id)
	})
	if done {
		return code
	}
	// A name gone from the listing before it could be read is said
	// without it.
	opsview.Released(s.stdout, name, sv)
	return exitOK
}

func runKick(ctx context.Context, s *sys, c *command, args []string) int {
	o, id, ops, code, ok := parseAdmin(s, c, args, "session id", false)
	if !ok {
		return code
	}
	if code, ok := checkSessionID(s, c, id); !ok {
		return code
	}
	sv, code, done := postSession(ctx, s, c, o, ops, id, "kick", func() string {
		switch name, others := ops.SessionLock(ctx, id); {
		case name != "" && others > 0:
			return fmt.Sprintf("session %s holds lock %s with %s and cannot be kicked; use 'baton release -session %s' (this holder) or 'baton release %s' (every holder)",
				id, human.Escape(name), human.Plural(others, "other holder", "other holders"), id, human.ShellQuote(name))
		case name != "":
			return fmt.Sprintf("session %s holds lock %s and cannot be kicked; use 'baton release %s'", id, human.Escape(name), human.ShellQuote(name))
		}
		return fmt.Sprintf("session %s holds its lock and cannot be kicked; use 'baton release -session %s'", id, id)
	})
	if done {
		return code
	}
	opsview.Kicked(s.stdout, sv)
	return exitOK
}

// checkSessionID refuses an id that is not a number: most likely a lock
// name, or an owner text, which the API would only answer "not found".
func checkSessionID(s *sys, c *command, id string) (code int, ok bool) {
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return usageError(s, c.name, fmt.Sprintf("session ids are numbers, as 'baton locks NAME' lists them: %q is not one", id)), false
	}
	return exitOK, true
}

// postSession POSTs action (release, kick) to session id and hands back
// its SESSION. A 409 is told with conflict's line: the API's advice names
// its own URL, an operator here wants our commands. When done is true
// (a failure, or -json printed), code is the exit code.
func postSession(ctx context.Context, s *sys, c *command, o adminOptions, ops *opsclient.Client, id, action string, conflict func() string) (sv opsclient.Session, code int, done bool) {
	body, err := ops.Do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/"+action)
	var ae *opsclient.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return sv, failure(s, c.name, conflict()), true
	}
	if err != nil {
		return sv, adminFailed(s, c.name, err), true
	}
	return sessionAnswer(s, c, ops, o.json, body)
}

// sessionAnswer handles the SESSION that release and kick answer with: with
// -json it prints it as sent (done), otherwise it decodes it for the
// caller's summary line.
func sessionAnswer(s *sys, c *command, ops *opsclient.Client, asJSON bool, body []byte) (sv opsclient.Session, code int, done bool) {
	if asJSON {
		s.stdout.Write(body)
		return sv, exitOK, true
	}
	if err := json.Unmarshal(body, &sv); err != nil {
		return sv, failure(s, c.name, fmt.Sprintf("the ops API at %s sent bad JSON: %v", ops.Addr(), err)), true
	}
	return sv, 0, false
}

// adminFailed prints a failed request and returns its exit code.
func adminFailed(s *sys, cmd string, err error) int {
	var ae *opsclient.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		fmt.Fprintf(s.stderr, "baton %s: %s\n", cmd, human.OneLine(err.Error()))
		return exitNotFound
	}
	return failure(s, cmd, err.Error())
}

// adminToken is the bearer token: from file if given, else from
// $BATON_ADMIN_TOKEN; "" if neither.
func adminToken(s *sys, file string) (string, error) {
	if file != "" {
		return tokenfile.Read(file)
	}
	tok, _ := s.lookupEnv(adminEnv)
	return strings.TrimSpace(tok), nil
}
