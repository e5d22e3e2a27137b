package idempotency_test

import (
	"testing"

	"github.com/fencelock/fencelock/internal/servertest"
)

func TestMain(m *testing.M) {
	servertest.Main(m, nil)
}
