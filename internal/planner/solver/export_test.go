package solver

// NoFailMemo turns the round's shortcut for pods like one that failed off,
// for TestFailedPodsShortcut.
var NoFailMemo = &noFailMemo

// NoJointSearch turns the exact search on dynamic nodes off, for
// TestPlanDynamicNode's rows that placing devices one by one misses.
var NoJointSearch = &noJointSearch

// FirstJointFit has the exact search on dynamic nodes take the first fit
// found, not the cheapest, for TestPlanDynamicNode's rows where they
// differ.
var FirstJointFit = &firstJointFit
