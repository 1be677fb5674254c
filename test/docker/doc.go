// Package docker checks the project's own Docker engine (hack/docker/up.sh)
// while it runs: that it and its containers cannot send a packet off this
// machine, and that it leaves the host's network namespace alone. The tests
// have the build tag docker and run through hack/docker/run.sh, which
// starts the engine and always stops it:
//
//	hack/docker/run.sh go test -tags docker ./test/docker/...
package docker
