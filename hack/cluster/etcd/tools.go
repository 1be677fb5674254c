//go:build tools

// Package etcd only records, for go mod tidy, that this module builds the
// etcd server command (go.etcd.io/etcd/server/v3 is its main package).
package etcd

import _ "go.etcd.io/etcd/server/v3"
