package demo

import "golang.org/x/sys/unix"

// mono returns CLOCK_MONOTONIC in nanoseconds. On Linux that clock is one
// for the whole system, so readings taken by different processes (the
// workers and the master) can be compared; Go's own monotonic reading in
// time.Time is relative to the start of each process and cannot. (On other
// Unix systems CLOCK_MONOTONIC is also system-wide in practice.)
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("demo: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
