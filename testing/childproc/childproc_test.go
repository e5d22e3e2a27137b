package childproc_test

import (
	"testing"

	"github.com/fencelock/fencelock/testing/childproc"
)

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"a\nb\nc", 0, ""},
	} {
		if got := childproc.Tail(tc.in, tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
