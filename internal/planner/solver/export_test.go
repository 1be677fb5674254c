package solver

// NoFailMemo turns the round's shortcut for pods like one that failed off,
// for TestFailedPodsShortcut.
var NoFailMemo = &noFailMemo
