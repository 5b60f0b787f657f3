// Package clusterharness holds only tests: the fault harness of replicated
// mode. It runs real `baton serve` nodes (three founders, at times five
// voters), each in a network namespace of its own with two links (one for
// Raft, one for clients) when the test runs as root with iproute2, or on
// loopback addresses otherwise. Go client loops take short locks with 1 s
// leases and raw wire holders (believers) hold locks for many seconds with
// 1, 10 and 60 s leases, all against a fenced register; shared believers
// (protocol version 2) fill a semaphore of limit 3 against a slot counter
// (semaphore_test.go). Meanwhile a schedule of faults hits the cluster:
// kill -9, SIGSTOP, a cut Raft link, SIGTERM, a full restart, compound
// faults inside a new leader's grace, and membership faults (members
// added and removed under load and in a grace, three voters grown to five
// and back, disks wiped and nodes restarted with their usual flags, which
// must refuse, members replaced under new ids, a voter that lags behind);
// each leader fault also cuts, or makes deaf, the links of the long
// holders on the node it hits, so that they go on believing and only the
// grace protects the next holder. A checker then
// asserts that no two holders of a mutex overlapped, that the semaphore
// never had more holders at once than its limit (a holder's interval is
// its belief as docs/protocol.md defines it), and that tokens only rose. The
// mutation gate runs the faultinject build with each safety rule switched
// off and requires the checker to fail.
// The fault tests run only when BATON_CLUSTER_FAULTS is set
// (.ci/clusterfaults.sh sets it); docs/reliability.md describes them.
package clusterharness
