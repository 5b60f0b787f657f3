//go:build faultinject

package server

import "os"

// The fault harness's mutation knobs of protocol version 3 that live in
// the server, in test builds only (go build -tags faultinject ./cmd/baton;
// cluster/mutations_faultinject.go names them with the cluster's). Each
// switches one rule off when its variable is "1" in the process's
// environment, so that the harness can show that its checker reports what
// the rule prevents. Normal builds do not contain this file.
const (
	// ResumeAfterGraceVar: a resume of a claim of an earlier term is
	// taken back after the grace too.
	ResumeAfterGraceVar = "BATON_TEST_RESUME_AFTER_GRACE"
	// LowerTokenWinsVar: when a resumed holder cannot hold beside the
	// name's holders, the lower token wins: the holders above it are
	// ended for it.
	LowerTokenWinsVar = "BATON_TEST_LOWER_TOKEN_WINS"
	// NoCredentialCheckVar: a resume's credential is not checked.
	NoCredentialCheckVar = "BATON_TEST_NO_CREDENTIAL_CHECK"
)

func resumeAfterGrace() bool  { return os.Getenv(ResumeAfterGraceVar) == "1" }
func lowerTokenWins() bool    { return os.Getenv(LowerTokenWinsVar) == "1" }
func noCredentialCheck() bool { return os.Getenv(NoCredentialCheckVar) == "1" }
