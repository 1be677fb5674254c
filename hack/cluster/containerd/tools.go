//go:build tools

// Package containerd only records, for go mod tidy, which containerd
// commands this module builds; ../build.sh builds them by import path.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
