// Package clusterharness holds only tests: the fault harness of replicated
// mode (issue 13). It runs three real `baton serve` nodes, each in a network
// namespace of its own with two links (one for Raft, one for clients) when
// the test runs as root with iproute2, or on loopback addresses otherwise;
// many Go clients take five locks in turn against a fenced register while
// one fault at a time hits the cluster (kill -9, SIGSTOP, a cut Raft link,
// SIGTERM, a full restart); a checker then asserts that no two holders of a
// name overlapped and that tokens only rose. A control run with the
// failover grace switched off (the faultinject build) must make the checker
// fail. The fault tests run only when BATON_CLUSTER_FAULTS is set
// (.ci/clusterfaults.sh sets it); docs/reliability.md describes them.
package clusterharness
