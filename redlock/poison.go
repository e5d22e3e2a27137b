package redlock

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/fencelock/fencelock/driver"
)

// maxPoisoned caps the holds whose late undo releases a Backend remembers.
// An entry is forgotten when its hold is released; one whose hold never is
// (an Acquire that gave up without a release, a Client that crashed) stays
// until this many newer ones push it out, oldest first. Beyond that many
// holds with a lost undo release at once, the oldest lose the protection
// (see the package doc).
const maxPoisoned = 10_000

// poisonedMasters marks, by master index, the masters whose undo release of
// one hold was not confirmed. nil marks none. A stored value is never
// changed (add stores a new one), so readers use it without the lock.
type poisonedMasters []bool

// has reports whether master i is marked.
func (p poisonedMasters) has(i int) bool { return i < len(p) && p[i] }

// poisonSet remembers, per hold (a token of a key), the masters whose undo
// release was not confirmed: that release may still be applied there at any
// moment, and it would take away any hold of the same token there, such as
// the grant of the Client's next attempt. Safe for concurrent use.
type poisonSet struct {
	size atomic.Int64 // len(refs), read without mu on the hot path

	mu    sync.Mutex
	max   int
	refs  map[driver.Ref]*poisonEntry
	order list.List // of driver.Ref, least recently marked first
}

type poisonEntry struct {
	masters poisonedMasters
	elem    *list.Element
}

func newPoisonSet(max int) *poisonSet {
	return &poisonSet{max: max, refs: make(map[driver.Ref]*poisonEntry)}
}

// add marks masters (indexes below n, the number of masters) for ref, on
// top of those marked already, and drops the least recently marked holds
// beyond the cap.
func (p *poisonSet) add(ref driver.Ref, n int, masters []int) {
	if len(masters) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	marked := make(poisonedMasters, n)
	e := p.refs[ref]
	if e != nil {
		copy(marked, e.masters)
		p.order.MoveToBack(e.elem)
	} else {
		e = &poisonEntry{elem: p.order.PushBack(ref)}
		p.refs[ref] = e
	}
	for _, i := range masters {
		marked[i] = true
	}
	e.masters = marked
	for len(p.refs) > p.max {
		oldest := p.order.Front()
		delete(p.refs, p.order.Remove(oldest).(driver.Ref))
	}
	p.size.Store(int64(len(p.refs)))
}

// get returns the masters marked for ref (nil: none).
func (p *poisonSet) get(ref driver.Ref) poisonedMasters {
	if p.size.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.refs[ref]; e != nil {
		return e.masters
	}
	return nil
}

// forget drops ref's marks.
func (p *poisonSet) forget(ref driver.Ref) {
	if p.size.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.refs[ref]; e != nil {
		p.order.Remove(e.elem)
		delete(p.refs, ref)
		p.size.Store(int64(len(p.refs)))
	}
}

// len returns how many holds have marks.
func (p *poisonSet) len() int { return int(p.size.Load()) }
