// Package e2e is migflex's end-to-end suite: Go tests against the local
// single-node cluster of hack/cluster (a real kubelet, containerd, API
// server). The tests carry the build tag e2e, so `go test ./...` never runs
// them; run them with
//
//	make test-e2e                       # build, bring up, test, always tear down
//	hack/cluster/e2e.sh -run TestName   # the same, with go test flags
//
// or, against a cluster that is already up (hack/cluster/up.sh),
//
//	KUBECONFIG=.cache/cluster/admin.kubeconfig go test -tags e2e ./test/e2e/...
//
// Reusable helpers live in test/e2e/framework.
package e2e
