// Package testutil holds what many packages' tests share and production
// code never imports.
package testutil

import (
	"testing"
	"time"
)

// HangTimeout bounds every wait in tests. It only turns a hang into a
// failure: no test passes or fails on how fast something happens.
const HangTimeout = 90 * time.Second

// pollInterval is how often Eventually looks again, for conditions nothing
// signals (state another process or the API server changes).
const pollInterval = 10 * time.Millisecond

// Eventually polls cond until it holds, and fails the test if it has not
// after HangTimeout.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(HangTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(pollInterval)
	}
}
