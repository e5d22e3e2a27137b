package redisbackend

import (
	"slices"
	"testing"
)

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

// keysFor and releaseKeys cut the names out of one string; they must be the
// names keys.go documents, with and without a namespace.
func TestKeyNames(t *testing.T) {
	for _, tc := range []struct{ ns, key, base string }{
		{"lock", "orders:42", "lock:{orders:42}"},
		{"", "k", "{k}"},
		{"a:b", "", "a:b:{}"},
	} {
		k := keysFor(tc.ns, tc.key)
		got := []string{k.base, k.lock, k.fence, k.channel}
		want := []string{tc.base, tc.base + ":lock", tc.base + ":fence", tc.base + ":released"}
		if !slices.Equal(got, want) {
			t.Errorf("keysFor(%q, %q) = %q, want %q", tc.ns, tc.key, got, want)
		}
		got = k.releaseKeys("TOK")
		want = []string{tc.base + ":lock", tc.base + ":tombstone:TOK", tc.base + ":queue", tc.base + ":queue:ends", tc.base + ":fence"}
		if !slices.Equal(got, want) {
			t.Errorf("releaseKeys of %q = %q, want %q", tc.base, got, want)
		}
		if k.tombstone("TOK") != want[1] || k.queue() != want[2] || k.queueEnds() != want[3] {
			t.Errorf("tombstone, queue or queueEnds of %q differ from releaseKeys", tc.base)
		}
	}
}
