//go:build race

package fencelock_test

// raceAllocs is what the race detector adds to maxClientCycleAllocs: the
// token's random bytes, which crypto/rand's Read moves to the heap when
// instrumented.
const raceAllocs = 1
