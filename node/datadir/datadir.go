package datadir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Ensure creates dir with mode 0700 if it is missing, and refuses one
// that others can read or write.
func Ensure(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("data dir %s has mode %04o: others must not have access (chmod 700 %s)", dir, st.Mode().Perm(), dir)
	}
	return nil
}

// writeFile writes b to path with mode 0600 so that a crash never leaves
// a half-written file: to a temporary file in the same directory first,
// fsynced, then moved into place, and the directory fsynced. With
// replace, an existing file at path is replaced (rename); without, it is
// an error (link: never overwrite).
func writeFile(path string, b []byte, replace bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if replace {
		err = os.Rename(tmp.Name(), path)
	} else {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a file moved into dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
