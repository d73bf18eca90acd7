package testnet

import (
	"os"
	"testing"
)

// TestMain runs the package's tests and benchmarks, except in a process
// that BenchmarkSurge started from this test binary as its early-client
// process: there, with earlyEnv set to the helper's configuration
// (surge_early_test.go), it runs runEarlyHelper instead and exits with
// its status, so that the early clients' keepalives are timed outside the
// process that runs the surge clients.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(earlyEnv); cfg != "" {
		os.Exit(runEarlyHelper(cfg, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
