package node

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/overlayd/overlayd/node/client"
)

// TestGroupStateRoundTrip: what a daemon saves of its groups is what it
// reads back after a restart; no file is no groups.
func TestGroupStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if got, err := loadGroupState(dir); err != nil || got != nil {
		t.Fatalf("no file: %v, %v; want nothing", got, err)
	}
	want := []client.GroupState{{Group: "a"}, {Group: "b", Epoch: 7, Seq: 42}}
	if err := saveGroupState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadGroupState(dir)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("read back %v, %v; want %v", got, err, want)
	}
	fi, err := os.Stat(filepath.Join(dir, groupStateFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("groups file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

// TestGroupStateBadFile: a damaged groups file stops the start with an
// error naming the file; it is not ignored (the daemon would silently
// leave its groups) nor overwritten.
func TestGroupStateBadFile(t *testing.T) {
	for name, content := range map[string]string{
		"not json":      "groups: [a]",
		"unknown field": `{"groups": [], "extra": 1}`,
		"too large":     strings.Repeat(" ", groupStateMax+1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, groupStateFile)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := loadGroupState(dir)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming %s", err, path)
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Fatal("the damaged file was changed")
			}
		})
	}
}
