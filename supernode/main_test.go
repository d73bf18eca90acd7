package supernode

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// Admission session, Router link and lookup, fanout worker and mocknet host
// the tests start must be stopped by their cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
