// Package adapt gives a Client one view of its store: a driver.Store and the
// capabilities it has, whether the store implements the driver interfaces
// itself or only the Backend interface and its capability interfaces, which
// the adapter maps onto them.
package adapt

import "github.com/fencelock/fencelock/driver"

// Caps are a store and its capabilities, found once per Client. A nil
// capability is one the store lacks.
type Caps struct {
	Store     driver.Store
	Notifier  driver.Notifier
	Lines     driver.Lines
	Inspector driver.Inspector
	Ticker    driver.Ticker
	// InLine reports that Lines keeps a line of waiters (AcquireInLine).
	InLine bool
	// HandsOff reports that Lines' HandOff may hand a lock over.
	HandsOff bool
}

// Of returns b's capabilities: those of a driver.Store found by type
// assertion, or, for a Backend that is no Store, the adapter's, which has
// exactly the capabilities b's interfaces give.
func Of(b driver.Backend) Caps {
	if s, ok := b.(driver.Store); ok {
		c := Caps{Store: s}
		c.Notifier, _ = s.(driver.Notifier)
		c.Lines, _ = s.(driver.Lines)
		c.Inspector, _ = s.(driver.Inspector)
		c.Ticker, _ = s.(driver.Ticker)
		c.InLine, c.HandsOff = c.Lines != nil, c.Lines != nil
		return c
	}
	a := newAdapter(b)
	c := Caps{Store: a}
	c.Inspector, _ = b.(driver.Inspector)
	c.Ticker, _ = b.(driver.Ticker)
	if a.releases != nil || a.fair != nil || a.sem != nil || a.rw != nil {
		c.Notifier = a
	}
	if a.fair != nil || a.handOff != nil {
		c.Lines = a
	}
	c.InLine, c.HandsOff = a.fair != nil, a.handOff != nil
	return c
}

// Store returns b as a driver.Store: b itself, or the adapter. The adapter
// implements every capability interface, and answers ErrUnsupported, before
// any I/O, for what b lacks.
func Store(b driver.Backend) driver.Store { return Of(b).Store }
