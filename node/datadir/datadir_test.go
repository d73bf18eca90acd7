package datadir

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overlayd/overlayd/node/client"
)

// newDir returns a fresh data dir of mode 0700 that does not exist yet
// (Ensure or LoadOrCreateKey creates it).
func newDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "d")
}

// onlyFiles fails unless dir holds exactly names: no temporary file left.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

func TestEnsure(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string // "" for no error
	}{
		{"missing", func(*testing.T, string) {}, ""},
		{"existing 0700", func(t *testing.T, dir string) { mkdir(t, dir, 0o700) }, ""},
		{"open to others", func(t *testing.T, dir string) { mkdir(t, dir, 0o755) }, "chmod 700"},
		{"a file", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newDir(t)
			tt.setup(t, dir)
			err := Ensure(dir)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
					t.Fatalf("dir mode %04o, want 0700", st.Mode().Perm())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestWriteFile: both ways of putting a file in place leave mode 0600 and
// no temporary file; without replace an existing file is an error and
// stays as it was, with replace it is replaced.
func TestWriteFile(t *testing.T) {
	dir := newDir(t)
	if err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "f")
	for i, step := range []struct {
		b       string
		replace bool
		fails   bool
		want    string
	}{
		{b: "one", want: "one"},
		{b: "two", fails: true, want: "one"},
		{b: "three", replace: true, want: "three"},
	} {
		err := writeFile(path, []byte(step.b), step.replace)
		if (err != nil) != step.fails {
			t.Fatalf("step %d: err = %v, want failure %v", i, err, step.fails)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != step.want {
			t.Fatalf("step %d: file holds %q, %v; want %q", i, b, err, step.want)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Fatalf("step %d: mode %04o, want 0600", i, st.Mode().Perm())
		}
		onlyFiles(t, dir, "f")
	}
	// A directory that cannot hold the temporary file is an error.
	if err := writeFile(filepath.Join(dir, "missing", "f"), []byte("x"), true); err == nil {
		t.Fatal("wrote into a missing directory")
	}
}

// TestKeyPersists: the key created on first use is the one read back,
// mode 0600 in a 0700 directory.
func TestKeyPersists(t *testing.T) {
	dir := newDir(t)
	a, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Equals(b) {
		t.Fatal("the key read back is not the one created")
	}
	if st, _ := os.Stat(filepath.Join(dir, KeyFile)); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %04o, want 0600", st.Mode().Perm())
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %04o, want 0700", st.Mode().Perm())
	}
	onlyFiles(t, dir, KeyFile)
}

// TestKeyErrors: a bad key file or data dir is an error naming the fix,
// and the key file is never replaced.
func TestKeyErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"corrupt key", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, KeyFile), []byte("not a key"), 0o600)
		}, "corrupt"},
		{"empty key", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, KeyFile), nil, 0o600)
		}, "identity key"},
		{"key readable by others", func(t *testing.T, dir string) {
			k, _, _ := crypto.GenerateEd25519Key(rand.Reader)
			b, _ := crypto.MarshalPrivateKey(k)
			os.WriteFile(filepath.Join(dir, KeyFile), b, 0o644)
			os.Chmod(filepath.Join(dir, KeyFile), 0o644)
		}, "chmod 600"},
		{"key unreadable", func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, KeyFile), 0o700)
		}, "identity key"},
		{"data dir open to others", func(t *testing.T, dir string) {
			os.Chmod(dir, 0o755)
		}, "chmod 700"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newDir(t)
			mkdir(t, dir, 0o700)
			tt.setup(t, dir)
			before, _ := os.ReadFile(filepath.Join(dir, KeyFile))
			_, err := LoadOrCreateKey(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
			after, _ := os.ReadFile(filepath.Join(dir, KeyFile))
			if string(before) != string(after) {
				t.Fatal("a bad key file was replaced")
			}
		})
	}
}

// TestGroupsRoundTrip: what a daemon saves of its groups is what it
// reads back after a restart; no file is no groups; a save replaces the
// file before it.
func TestGroupsRoundTrip(t *testing.T) {
	dir := newDir(t)
	if err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadGroups(dir); err != nil || got != nil {
		t.Fatalf("no file: %v, %v; want nothing", got, err)
	}
	for _, want := range [][]client.GroupState{
		{{Group: "a"}, {Group: "b", Epoch: 7, Seq: 42}},
		{{Group: "b", Epoch: 7, Seq: 43}},
		{},
	} {
		if err := SaveGroups(dir, want); err != nil {
			t.Fatal(err)
		}
		got, err := LoadGroups(dir)
		if err != nil || len(got) != len(want) || !slices.Equal(got, want) {
			t.Fatalf("read back %v, %v; want %v", got, err, want)
		}
		fi, err := os.Stat(filepath.Join(dir, GroupsFile))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("groups file mode %v, %v; want 0600", fi.Mode().Perm(), err)
		}
		onlyFiles(t, dir, GroupsFile)
	}
}

// TestGroupsBadFile: a damaged groups file stops the start with an
// error naming the file; it is not ignored (the daemon would silently
// leave its groups) nor overwritten.
func TestGroupsBadFile(t *testing.T) {
	for name, content := range map[string]string{
		"not json":      "groups: [a]",
		"unknown field": `{"groups": [], "extra": 1}`,
		"too large":     strings.Repeat(" ", MaxGroups+1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, GroupsFile)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadGroups(dir)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming %s", err, path)
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Fatal("the damaged file was changed")
			}
		})
	}
}
