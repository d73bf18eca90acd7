package dirdriver

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine a test started (Run,
// Serve and the loops they own) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
