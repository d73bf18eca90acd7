package trust

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine a test started (Run
// and the revocation reader it owns) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
