//go:build !race

package fencelock_test

// raceAllocs is what the race detector adds to maxClientCycleAllocs: it is
// off.
const raceAllocs = 0
