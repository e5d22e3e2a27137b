package driver

// Kind is the kind of a hold: the plain lock, a permit of a semaphore, or a
// read or the write hold of a read-write lock. The plain lock, the semaphore
// and the read-write lock of one name are apart: they never block each other.
type Kind uint8

// The kinds of hold.
const (
	KindLock      Kind = iota // the plain lock (Client.Acquire, Do, AcquireAll, Campaign, RunJob)
	KindSemaphore             // a permit of a Semaphore
	KindRead                  // a read hold of an RWLock
	KindWrite                 // the write hold of an RWLock
)

// String returns "lock", "semaphore", "read" or "write".
func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
	case KindRead:
		return "read"
	case KindWrite:
		return "write"
	}
	return "unknown"
}
