// Package opsclient is the client of the ops HTTP API that the operator
// commands and baton run's status line use: a list of nodes asked in turn
// (any node answers, a follower by sending the request on to the leader),
// the admin token and TLS, the API's JSON shapes, its answers turned into
// errors that say what to do, and the questions that take more than one
// request (the leader's view, waiting for a new member's first answer).
package opsclient
