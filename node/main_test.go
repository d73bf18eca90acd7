package node

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine a node started is
// still running after every test's nodes were closed: Close must wait for
// everything it started (the client, the supernode side, the directory,
// the API). Only goroutines that go-libp2p and its dependencies start
// once per process, outside any host's lifetime, are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
