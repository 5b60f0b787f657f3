package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeClusterUsageErrors: every bad combination of the cluster flags
// is one line on stderr and exit 2, with nothing created or started.
func TestServeClusterUsageErrors(t *testing.T) {
	t.Parallel()
	const peers = "n1=127.0.0.1:7301,n2=127.0.0.1:7302,n3=127.0.0.1:7303"
	base := []string{"-addr=127.0.0.1:7101", "-ops-addr=127.0.0.1:7201"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"node-id alone", []string{"-node-id=n1"}, nil, "replicated mode needs -raft-addr"},
		{"node-id without peers", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301"}, nil, "replicated mode needs -peers"},
		{"peers without node-id", []string{"-peers=" + peers}, nil, "replicated mode needs -node-id"},
		{"self not in peers", []string{"-node-id=n9", "-raft-addr=127.0.0.1:7309", "-peers=" + peers}, nil, `this node "n9" is not in the list; start it with -join`},
		{"join as a founder", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=" + peers, "-join"}, nil, "-join is for a node added later"},
		{"duplicate id", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=" + peers + ",n2=127.0.0.1:7304"}, nil, `id "n2" appears twice`},
		{"duplicate raft address", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=n1=127.0.0.1:7301,n2=127.0.0.1:7301"}, nil, "appears twice"},
		{"peer without =", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=n1"}, nil, `peers: "n1" is not id=host:port`},
		{"peer bad address", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=n1=127.0.0.1:7301,n2=nowhere"}, nil, `member "n2"`},
		{"self at another address", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7999", "-peers=" + peers}, nil, "is listed at"},
		{"raft on all interfaces", []string{"-node-id=n1", "-raft-addr=0.0.0.0:7301", "-peers=" + peers}, nil, "must be a reachable address"},
		{"advertise unspecified", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=" + peers, "-addr=0.0.0.0:7101"}, nil, "advertise-addr 0.0.0.0:7101 is not an address clients can reach"},
		{"lease timeout above heartbeat", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=" + peers, "-raft-leader-lease-timeout=2s"}, nil, "raft-leader-lease-timeout (2s) must not exceed raft-heartbeat-timeout (200ms)"},
		{"election below heartbeat", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=" + peers, "-raft-election-timeout=100ms"}, nil, "raft-election-timeout (100ms) must be at least raft-heartbeat-timeout (200ms)"},
		{"env node-id alone", nil, map[string]string{"BATON_NODE_ID": "n1"}, "replicated mode needs -raft-addr"},
		{"raft-advertise alone", []string{"-raft-advertise=n1.baton:7301"}, nil, "raft-advertise is for replicated mode"},
		{"raft-advertise not host:port", []string{"-node-id=n1", "-raft-addr=0.0.0.0:7301", "-raft-advertise=n1.baton", "-peers=n1=n1.baton:7301"}, nil, `raft-advertise "n1.baton" is not host:port`},
		{"raft-advertise unspecified", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-raft-advertise=0.0.0.0:7301", "-peers=n1=0.0.0.0:7301"}, nil, "raft-advertise 0.0.0.0:7301: the other nodes dial it"},
		{"raft-advertise port 0", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-raft-advertise=n1.baton:0", "-peers=n1=n1.baton:0"}, nil, "raft-advertise n1.baton:0: the other nodes dial it"},
		{"self listed at raft-addr, not raft-advertise", []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-raft-advertise=n1.baton:7301", "-peers=" + peers}, nil, `this node "n1" is listed at "127.0.0.1:7301" but -raft-advertise is "n1.baton:7301"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dataDir := filepath.Join(t.TempDir(), "data")
			env := map[string]string{"BATON_DATA_DIR": dataDir}
			for k, v := range tt.env {
				env[k] = v
			}
			code, stdout, stderr := runCLI(t, env, append(append([]string{"serve"}, base...), tt.args...)...)
			if code != exitUsage {
				t.Errorf("exit code %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if l := lines(stderr); len(l) != 1 || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data directory exists after a usage error (stat: %v)", err)
			}
		})
	}
}

func TestClusterCommandUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "add", "n4"}, "add needs ID and RAFT-HOST:PORT"},
		{[]string{"cluster", "add", "n4", "nowhere"}, `raft address "nowhere" is not host:port`},
		{[]string{"cluster", "remove"}, "remove needs ID"},
		{[]string{"cluster", "frob"}, `unknown argument "frob"`},
	} {
		code, _, stderr := runCLI(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
