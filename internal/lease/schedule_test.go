package lease

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSchedule checks the keeper's heap against a plain list under random
// pushes, pops, removals and updates: pop returns the earliest time, every
// Entry.slot names its entry, and a lock taken out has slot 0.
func TestSchedule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s schedule
	in := map[*Entry]int64{} // the reference: entry → time
	var all []*Entry
	check := func(step int) {
		t.Helper()
		if s.len() != len(in) {
			t.Fatalf("step %d: %d entries, want %d", step, s.len(), len(in))
		}
		for i, e := range s.entries {
			if int(e.l.slot) != i+1 {
				t.Fatalf("step %d: entry %d has slot %d", step, i, e.l.slot)
			}
			if e.at != in[e.l] {
				t.Fatalf("step %d: entry %d at %d, want %d", step, i, e.at, in[e.l])
			}
			if i > 0 && s.entries[(i-1)/schedArity].at > e.at {
				t.Fatalf("step %d: entry %d earlier than its parent", step, i)
			}
		}
		for _, l := range all {
			if _, ok := in[l]; !ok && l.slot != 0 {
				t.Fatalf("step %d: a lock not in the schedule has slot %d", step, l.slot)
			}
		}
	}
	pick := func() *Entry {
		for l := range in {
			return l
		}
		return nil
	}
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 4 || len(in) == 0:
			l := &Entry{}
			all = append(all, l)
			at := rng.Int64N(1000) // many ties
			s.push(l, at)
			in[l] = at
		case op < 6:
			earliest := slices.Min(slices.Collect(maps.Values(in)))
			l := s.pop()
			if in[l] != earliest {
				t.Fatalf("step %d: pop gave a lock at %d, want the earliest, %d", step, in[l], earliest)
			}
			delete(in, l)
		case op < 8:
			l := pick()
			s.remove(l)
			s.remove(l) // a second remove does nothing
			delete(in, l)
		default:
			l := pick()
			at := rng.Int64N(1000)
			s.update(l, at)
			in[l] = at
		}
		if step%97 == 0 || len(in) < 10 {
			check(step)
		}
	}
	// Drain: in time order, and the entries shrink back.
	last := int64(-1)
	for s.len() > 0 {
		l := s.pop()
		if in[l] < last {
			t.Fatalf("drain: %d after %d", in[l], last)
		}
		last = in[l]
		delete(in, l)
	}
	check(-1)
}

// TestScheduleShrinks: after most locks are gone the entries give their
// memory back.
func TestScheduleShrinks(t *testing.T) {
	var s schedule
	locks := make([]*Entry, 20000)
	for i := range locks {
		locks[i] = &Entry{}
		s.push(locks[i], int64(i))
	}
	for _, l := range locks[:19000] {
		s.remove(l)
	}
	if c := cap(s.entries); c > 8*s.len() {
		t.Errorf("capacity %d for %d entries", c, s.len())
	}
}
