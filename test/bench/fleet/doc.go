// Package fleet is the simulated cluster the benchmarks run against: Node
// objects with realistic GPU Allocatable mixes, the pods bound to them in
// capacity mode, and the mix of pods sent for admission with the outcome
// each must get. It is pure: the objects go to a real API server through
// test/bench/cluster, and fleet's own tests check the mix against
// internal/webhook/fallback, so a benchmark can never silently measure the wrong
// path (a "fallback" pod that is left unchanged, a "denied" pod allowed).
package fleet
