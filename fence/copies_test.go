package fence_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonlock/baton/clients/go/fence"
)

// TestClientCopies: each client carries the resource-side files it loads
// (the Go client as constants, the others as files of their package);
// every copy is the file in this folder, byte for byte.
func TestClientCopies(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.FromSlash(path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sql, set, check := read("postgres/baton_fence.sql"), read("redis/fenced_set.lua"), read("redis/fence.lua")
	copies := []struct {
		what, got, want string
	}{
		{"clients/go/fence.PostgresSQL", fence.PostgresSQL, sql},
		{"clients/go/fence.RedisFenceLua", fence.RedisFenceLua, check},
		{"clients/go/fence.RedisFencedSetLua", fence.RedisFencedSetLua, set},
	}
	for _, dir := range []string{"../clients/python/baton/fence_scripts", "../clients/typescript/fence"} {
		copies = append(copies,
			struct{ what, got, want string }{dir + "/baton_fence.sql", read(dir + "/baton_fence.sql"), sql},
			struct{ what, got, want string }{dir + "/fence.lua", read(dir + "/fence.lua"), check},
			struct{ what, got, want string }{dir + "/fenced_set.lua", read(dir + "/fenced_set.lua"), set})
	}
	for _, c := range copies {
		if c.got != c.want {
			t.Errorf("%s differs from fence/ (first difference at byte %d): copy the file again", c.what, firstDiff(c.got, c.want))
		}
	}
	if !strings.HasPrefix(sql, "-- Baton's fence for PostgreSQL") {
		t.Error("baton_fence.sql lost its header")
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
