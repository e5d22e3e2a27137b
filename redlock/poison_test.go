package redlock

import (
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/driver"
)

// The marks of a hold accumulate, are forgotten with it, and beyond the cap
// the least recently marked holds are dropped first.
func TestPoisonSet(t *testing.T) {
	ref := func(i int) driver.Ref {
		return driver.Ref{Namespace: "ns", Key: "k", Token: fmt.Sprint(i)}
	}
	p := newPoisonSet(3)
	if p.get(ref(0)).has(0) {
		t.Fatal("mark in an empty set")
	}
	p.add(ref(0), 5, nil)
	if p.len() != 0 {
		t.Fatalf("adding no master made %d entries", p.len())
	}
	p.add(ref(0), 5, []int{1})
	p.add(ref(0), 5, []int{3})
	if m := p.get(ref(0)); m.has(0) || !m.has(1) || m.has(2) || !m.has(3) || m.has(4) || m.has(5) {
		t.Fatalf("marks %v, want masters 1 and 3", m)
	}
	if p.get(ref(1)) != nil {
		t.Fatal("another token has marks")
	}
	p.forget(ref(0))
	if p.get(ref(0)) != nil || p.len() != 0 {
		t.Fatalf("after forget: %v, %d entries", p.get(ref(0)), p.len())
	}
	p.forget(ref(0)) // no entry: nothing happens

	for i := range 3 {
		p.add(ref(i), 3, []int{0})
	}
	p.add(ref(0), 3, []int{2}) // marked again: now the most recent
	p.add(ref(3), 3, []int{0}) // over the cap: ref(1) goes
	if p.len() != 3 || p.get(ref(1)) != nil {
		t.Fatalf("%d entries, ref 1: %v; want 3, ref 1 dropped", p.len(), p.get(ref(1)))
	}
	for _, i := range []int{0, 2, 3} {
		if !p.get(ref(i)).has(0) {
			t.Fatalf("ref %d lost its mark", i)
		}
	}
	p.forget(ref(2))
	p.add(ref(4), 3, []int{1})
	if p.len() != 3 || p.get(ref(0)) == nil || p.get(ref(3)) == nil || p.get(ref(4)) == nil {
		t.Fatalf("after a forget and an add: %d entries", p.len())
	}
}
