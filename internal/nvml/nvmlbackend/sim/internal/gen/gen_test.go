package main

import (
	"bytes"
	"os"
	"testing"
)

// TestGeneratedFileIsCurrent fails when go-nvml or the generator changed
// without `go generate ./internal/nvml/nvmlbackend/sim`.
func TestGeneratedFileIsCurrent(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../zz_generated_unsupported.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("zz_generated_unsupported.go is stale: run go generate ./internal/nvml/nvmlbackend/sim")
	}
}
