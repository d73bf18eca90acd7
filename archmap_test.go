package overlayd_test

import (
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// archPackagesSection is the heading of docs/ARCHITECTURE.md's section whose
// package table the test holds against the module.
const archPackagesSection = "## Packages and dependency direction"

// archTableHeader is the header row of that table; the section's other table
// (where a newcomer opens each concept) is not the package map.
const archTableHeader = "| package | what it is | state and time |"

var archRowPackage = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|")

// archTablePackages returns the packages named in the first cell of the
// package table's rows, relative to the module, with the line of each.
func archTablePackages(tb testing.TB) map[string]int {
	tb.Helper()
	b, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	rows := map[string]int{}
	inSection, inTable := false, false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "## "):
			if inSection {
				return rows
			}
			inSection = l == archPackagesSection
		case !inSection:
		case strings.TrimSpace(l) == archTableHeader:
			inTable = true
		case inTable && !strings.HasPrefix(l, "|"):
			return rows
		case inTable:
			m := archRowPackage.FindStringSubmatch(l)
			if m == nil {
				continue // the |---| row
			}
			if prev, dup := rows[m[1]]; dup {
				tb.Errorf("docs/ARCHITECTURE.md:%d: package %s has a second row (first at line %d)", i+1, m[1], prev)
			}
			rows[m[1]] = i + 1
		}
	}
	if len(rows) == 0 {
		tb.Fatalf("docs/ARCHITECTURE.md: no package table (header %q) under %q", archTableHeader, archPackagesSection)
	}
	return rows
}

// TestArchitecturePackageMap fails when a package of the module (go list
// ./...) has no row in docs/ARCHITECTURE.md's package table, or when the
// table has a row for a package that does not exist: the map a newcomer
// reads first must be the module as it is.
func TestArchitecturePackageMap(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	listed := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" || rel == p {
			continue // the repository root holds only these tests
		}
		listed[rel] = true
	}
	if len(listed) < 10 {
		t.Fatalf("go list ./... found only %d packages: %s", len(listed), out)
	}
	rows := archTablePackages(t)

	var missing, stale []string
	for p := range listed {
		if _, ok := rows[p]; !ok {
			missing = append(missing, p)
		}
	}
	for p := range rows {
		if !listed[p] {
			stale = append(stale, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, p := range missing {
		t.Errorf("package %s exists (go list ./...) but docs/ARCHITECTURE.md's package table (%q) has no row for it: add one saying what it is and how it handles state and time", p, archPackagesSection)
	}
	for _, p := range stale {
		t.Errorf("docs/ARCHITECTURE.md:%d lists package %s, which go list ./... does not find: remove the row, or add the package (a row may go in before its package when both land in the same merge)", rows[p], p)
	}
}
