// Package reliability holds only tests: the process-level fault suite of
// Baton. It builds the real baton binary once, runs `baton serve` and
// `baton run` as child processes on 127.0.0.1, and injects the faults a
// lock service must survive: kill -9 and SIGSTOP of holders, frozen and
// half-open links, slow and byte-a-second peers, SIGTERM and kill -9 of the
// server, hostile input from many connections. A checker runs many Go
// clients against a fenced resource while faults are injected and asserts
// that no two critical sections of a lock overlap unless fencing refused
// the older one. docs/reliability.md lists what each test proves.
package reliability
