package redisbackend

import "testing"

// The renewal's lock key is the one the other scripts use.
func TestLockKeyOf(t *testing.T) {
	for _, ns := range []string{"lock", "", "a:b"} {
		for _, key := range []string{"k", "orders:42", "{x", "a}b"} {
			if got, want := lockKeyOf(ns, key), keysFor(ns, key).lock; got != want {
				t.Errorf("lockKeyOf(%q, %q) = %q, want %q", ns, key, got, want)
			}
		}
	}
}
