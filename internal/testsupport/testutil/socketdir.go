package testutil

import (
	"os"
	"testing"
)

// SocketDir returns a new directory for unix sockets, removed when the test
// ends. It is short (under os.TempDir, not t.TempDir, whose names grow with
// the test's): a socket's path must fit sockaddr_un's 108 bytes.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
