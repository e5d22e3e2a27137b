package fencelock

import (
	"math"
	"testing"
	"time"
)

// Backoff never overflows, never exceeds Max and never goes below Min/2.
func TestExponentialBackoffBounds(t *testing.T) {
	for _, b := range []ExponentialBackoff{
		{Min: 10 * time.Millisecond, Max: time.Second},
		{Min: time.Millisecond, Max: math.MaxInt64},
		{Min: time.Second, Max: time.Second},
	} {
		for failures := 1; failures < 200; failures++ {
			d := b.Backoff(failures)
			if d < b.Min/2 || d > b.Max {
				t.Fatalf("%+v: Backoff(%d) = %v, outside [Min/2, Max]", b, failures, d)
			}
		}
	}
	if d := (ConstantBackoff{Delay: 100 * time.Millisecond}).Backoff(5); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("ConstantBackoff(100ms) = %v", d)
	}
}
