// Package overlayd_test holds repository-wide checks.
package overlayd_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/overlayd/overlayd"

// layer ranks the project's packages: a package may import only packages of
// a lower or equal rank (protocol ← overlay ← {node/client, supernode} ←
// node ← cmd; testnet may use all). node/client and node/role sit below
// node although they live under it: they are the client side and the role
// rules, which the daemon assembles.
func layer(pkg string) int {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	switch {
	case rel == "node/client" || strings.HasPrefix(rel, "node/client/"),
		rel == "node/role" || strings.HasPrefix(rel, "node/role/"):
		return 3
	}
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

// side names the two sides of the protocols: siblings that never import
// each other, so a rule both must agree on lives below them (overlay).
func side(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	switch {
	case rel == "node/client" || strings.HasPrefix(rel, "node/client/"):
		return "client"
	case rel == "supernode" || strings.HasPrefix(rel, "supernode/"):
		return "supernode"
	case rel == "node/role" || strings.HasPrefix(rel, "node/role/"):
		return "role"
	}
	return ""
}

// TestDependencyDirection fails on an import against the layering, on an
// import between the client and supernode sides (or of either by the role
// rules), and on a library package that constructs libp2p hosts or
// transports (p2p/...): only node and testnet build hosts; the others
// depend on core interfaces.
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
			if !strings.HasPrefix(d, module+"/") {
				if layer(pkg) <= 3 && (strings.HasPrefix(d, "github.com/libp2p/go-libp2p/p2p/") || d == "github.com/libp2p/go-libp2p") {
					t.Errorf("%s depends on %s: library packages use go-libp2p core/ interfaces; hosts are built in node and testnet", pkg, d)
				}
				continue
			}
			if layer(d) > layer(pkg) && !(layer(pkg) == 5 && strings.HasPrefix(d, module+"/testnet")) {
				t.Errorf("%s imports %s: dependencies point protocol ← overlay ← {node/client, supernode} ← node ← cmd", pkg, d)
			}
			if a, b := side(pkg), side(d); a != "" && b != "" && a != b {
				t.Errorf("%s imports %s: the %s and %s packages are siblings and never import each other; put the shared rule in overlay/", pkg, d, a, b)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages: go list output changed?", checked)
	}
}

// TestLayerRanks pins the ranks the check relies on, so a renamed package
// cannot slip out of it.
func TestLayerRanks(t *testing.T) {
	for pkg, want := range map[string]int{
		"protocol": 1, "overlay/cluster": 2, "supernode": 3, "supernode/fanout": 3,
		"node/client": 3, "node/role": 3, "node": 4, "node/localapi": 4, "node/config": 4, "node/version": 4, "node/host": 4, "node/api": 4, "node/roledriver": 4, "cmd/overlayd": 5, "testnet": 5,
	} {
		if got := layer(module + "/" + pkg); got != want {
			t.Errorf("layer(%s) = %d, want %d", pkg, got, want)
		}
	}
	if side(module+"/node/client") != "client" || side(module+"/supernode/capacity") != "supernode" || side(module+"/node") != "" {
		t.Error("side() misnames the protocol sides")
	}
}
