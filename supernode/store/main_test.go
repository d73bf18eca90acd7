package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a flusher outlives its store.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
