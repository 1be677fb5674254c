// Package manifests holds the tests of migflex's installation manifests:
// the Helm chart (deployments/helm/migflex), the kustomize base and overlays
// (deployments/kustomize) and the scripts that go with them.
//
// They render the manifests with the pinned tools (Helm from
// deployments/hack/install-helm.sh in .cache/tools, kubectl from the
// envtest assets), check what was rendered, have a real kube-apiserver
// (internal/testsupport/testenv) accept every object with a server-side dry run, and
// exercise the agent's ValidatingAdmissionPolicy and the RBAC of each
// component for real. Like testenv, a missing tool skips the tests that need
// it, unless MIGFLEX_REQUIRE_ENVTEST=1 (make test-integration), which makes
// it a failure.
package manifests
