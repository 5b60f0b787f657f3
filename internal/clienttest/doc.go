// Package clienttest holds only tests: the Go client (clients/go, a module
// of its own) against the real server in this process, over loopback TCP,
// with faults injected by internal/faultproxy, TLS from internal/testcerts,
// and paused holders as child processes. The client's own module keeps the
// tests that need no server (a scripted peer over net.Pipe, the fake clock
// of testing/synctest, the wire vectors) so that it requires nothing; the
// tests here need the server's packages, so they live in its module and
// use the client through its exported API only.
package clienttest
