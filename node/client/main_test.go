package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine a test started
// (clients, their session readers, mocknet hosts) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
