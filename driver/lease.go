package driver

import "time"

// PlaceLease is how long a waiter's place stays registered on the store
// without being renewed: a fair waiter's place in the line of a lock
// (Lines), a waiting writer's intent or a waiting reader's place
// (Request.Place). The Client renews a place every third of that while it
// waits, so a waiter that crashed or was paused holds the others up for this
// long at most.
const PlaceLease = 2 * time.Second

// MaxTTL is the longest lease a hold may have (a year). Stores may rely on
// it: no request asks for more.
const MaxTTL = 365 * 24 * time.Hour

// MinTTL is the shortest lease a hold may have. No request asks for less.
const MinTTL = 10 * time.Millisecond
