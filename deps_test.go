// Package overlayd_test holds repository-wide checks.
package overlayd_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/overlayd/overlayd"

// layer ranks the project's packages: a package may import only packages of
// a lower or equal rank (protocol ← overlay ← supernode ← node ← cmd;
// testnet may use all).
func layer(pkg string) int {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	switch top, _, _ := strings.Cut(rel, "/"); top {
	case "protocol":
		return 1
	case "overlay":
		return 2
	case "supernode":
		return 3
	case "node":
		return 4
	case "cmd":
		return 5
	case "testnet":
		return 5
	}
	return 0
}

// TestDependencyDirection fails on an import against the layering, and on a
// library package that constructs libp2p hosts or transports (p2p/...):
// only node and testnet build hosts; the others depend on core interfaces.
func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		if !strings.HasPrefix(pkg, module) || layer(pkg) == 0 {
			continue
		}
		checked++
		for _, d := range deps {
			if strings.HasPrefix(d, module+"/") && layer(d) > layer(pkg) && !(layer(pkg) == 5 && strings.HasPrefix(d, module+"/testnet")) {
				t.Errorf("%s imports %s: dependencies point protocol ← overlay ← supernode ← node ← cmd", pkg, d)
			}
			if layer(pkg) <= 3 && (strings.HasPrefix(d, "github.com/libp2p/go-libp2p/p2p/") || d == "github.com/libp2p/go-libp2p") {
				t.Errorf("%s depends on %s: library packages use go-libp2p core/ interfaces; hosts are built in node and testnet", pkg, d)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages: go list output changed?", checked)
	}
}
