package redisbackend

import "time"

// SetTurnGrace sets how long a process a release woke for its turn has the
// free lock to itself, and how long the others' waiters wait before trying
// anyway (otherTurnGrace), so that a test depends on the order of events
// and not on the speed of a busy machine.
func SetTurnGrace(b *Backend, d time.Duration) {
	b.turnGrace = d
	if b.notifier != nil {
		b.notifier.turnGrace = d
	}
}

// ProcessID returns the id under which b's process gets in line for a lock
// (its notifier's).
func ProcessID(b *Backend) string { return b.notifier.id }

// TurnHoldsMax is how many holds in a row a process may hand on to its own
// waiters during its turn (turnHoldsMax).
const TurnHoldsMax = turnHoldsMax
