package fencelock

import "sync"

// waitQueues line up the goroutines of one Client that wait for the same
// key. Only the head of a line contends with other processes (one attempt
// per wake-up); the others wait for their turn. So a release makes one
// attempt per waiting process, not one per waiting goroutine, and the
// goroutines of a process get the lock in the order they asked for it.
type waitQueues struct {
	mu    sync.Mutex
	lines map[string][]*place
}

// place is a place in a line.
type place struct {
	turn chan struct{} // closed when the place reaches the head
	// afterAcquire is set before turn is closed when the waiter before took
	// the lock: the new head then waits for its release instead of trying.
	afterAcquire bool
	wake         chan struct{} // a release by this Client; buffered
	turnTaken    bool          // the owner of the place has seen its turn come (its own field)
}

// isHead reports whether w's turn has come.
func (w *place) isHead() bool {
	select {
	case <-w.turn:
		return true
	default:
		return false
	}
}

// waiting reports whether goroutines are lined up for key.
func (q *waitQueues) waiting(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines[key]) > 0
}

// join adds a waiter at the end of key's line.
func (q *waitQueues) join(key string) *place {
	w := &place{turn: make(chan struct{}), wake: make(chan struct{}, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines == nil {
		q.lines = make(map[string][]*place)
	}
	q.lines[key] = append(q.lines[key], w)
	if len(q.lines[key]) == 1 {
		close(w.turn)
	}
	return w
}

// leave removes w from key's line; if w was the head, the next waiter's turn
// begins. acquired says that w leaves holding the lock.
func (q *waitQueues) leave(key string, w *place, acquired bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[key]
	for i, x := range line {
		if x != w {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			line[0].afterAcquire = acquired
			close(line[0].turn)
		}
		break
	}
	if len(line) == 0 {
		delete(q.lines, key)
	} else {
		q.lines[key] = line
	}
}

// released wakes the head of key's line after this Client released the lock,
// sooner than the release notification from the server would.
func (q *waitQueues) released(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if line := q.lines[key]; len(line) > 0 {
		select {
		case line[0].wake <- struct{}{}:
		default:
		}
	}
}
