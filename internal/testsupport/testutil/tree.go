package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteTree writes files (slash-separated path under root -> content)
// under root, making the directories they need, and returns root. A root
// of "" is a new temporary directory.
func WriteTree(t testing.TB, root string, files map[string]string) string {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
