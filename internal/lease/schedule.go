package lease

// schedule orders the holds a Keeper watches by when it must next look at
// each (its next renewal, or its local deadline): a min-heap with four
// children per node, so that it is half as deep as a binary heap and an
// operation touches fewer cache lines at a million holds. Each entry keeps
// its time next to the pointer, so comparisons never load an Entry; each
// Entry records its place (Entry.slot), so that taking a hold out or moving
// its time is O(log n). It is not safe for concurrent use: the Keeper
// guards it with Keeper.mu, which also guards every Entry.slot.
type schedule struct {
	entries []schedEntry
}

// schedEntry is one watched lock and when to look at it, in nanoseconds
// since the keeper's epoch on the monotonic clock.
type schedEntry struct {
	at int64
	l  *Entry
}

const schedArity = 4

// minShrinkCap is the capacity below which the entries are never shrunk.
const minShrinkCap = 1024

func (s *schedule) len() int { return len(s.entries) }

// top returns the earliest entry; the schedule must not be empty.
func (s *schedule) top() schedEntry { return s.entries[0] }

// contains reports whether l is in the schedule.
func (s *schedule) contains(l *Entry) bool { return l.slot != 0 }

// push adds l, which must not be in the schedule, at time at.
func (s *schedule) push(l *Entry, at int64) {
	s.entries = append(s.entries, schedEntry{at: at, l: l})
	s.up(len(s.entries) - 1)
}

// pop removes and returns the earliest lock; the schedule must not be empty.
func (s *schedule) pop() *Entry {
	l := s.entries[0].l
	s.removeAt(0)
	return l
}

// remove takes l out of the schedule, if it is in it.
func (s *schedule) remove(l *Entry) {
	if l.slot != 0 {
		s.removeAt(int(l.slot) - 1)
	}
}

// update moves l, which must be in the schedule, to time at.
func (s *schedule) update(l *Entry, at int64) {
	i := int(l.slot) - 1
	old := s.entries[i].at
	s.entries[i].at = at
	switch {
	case at < old:
		s.up(i)
	case at > old:
		s.down(i)
	}
}

func (s *schedule) removeAt(i int) {
	last := len(s.entries) - 1
	s.entries[i].l.slot = 0
	if i != last {
		s.entries[i] = s.entries[last]
	}
	s.entries[last] = schedEntry{} // no reference to a lock that is gone
	s.entries = s.entries[:last]
	if i != last {
		s.entries[i].l.slot = int32(i + 1)
		if !s.down(i) {
			s.up(i)
		}
	}
	// Give memory back after most of the locks are gone.
	if c := cap(s.entries); c > minShrinkCap && len(s.entries) < c/4 {
		s.entries = append(make([]schedEntry, 0, c/2), s.entries...)
	}
}

// up moves the entry at i towards the root until its parent is not later,
// and records the places of the entries it moves.
func (s *schedule) up(i int) {
	e := s.entries[i]
	for i > 0 {
		p := (i - 1) / schedArity
		if s.entries[p].at <= e.at {
			break
		}
		s.entries[i] = s.entries[p]
		s.entries[i].l.slot = int32(i + 1)
		i = p
	}
	s.entries[i] = e
	e.l.slot = int32(i + 1)
}

// down moves the entry at i away from the root until no child is earlier,
// and records the places of the entries it moves. It reports whether the
// entry moved.
func (s *schedule) down(i int) bool {
	n := len(s.entries)
	start := i
	e := s.entries[i]
	for {
		first := i*schedArity + 1
		if first >= n {
			break
		}
		least := first
		for c := first + 1; c < min(first+schedArity, n); c++ {
			if s.entries[c].at < s.entries[least].at {
				least = c
			}
		}
		if s.entries[least].at >= e.at {
			break
		}
		s.entries[i] = s.entries[least]
		s.entries[i].l.slot = int32(i + 1)
		i = least
	}
	s.entries[i] = e
	e.l.slot = int32(i + 1)
	return i != start
}
