package node

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// KeyFile is the identity key's file name in the data dir.
const KeyFile = "identity.key"

// EnsureDataDir creates dir with mode 0700 if it is missing, and refuses one
// that others can read or write.
func EnsureDataDir(dir string) error {
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

// LoadOrCreateIdentity returns the node's Ed25519 key from dir/KeyFile,
// creating it (0600) on first use. An existing key that is unreadable,
// corrupt or readable by others is an error: it is never replaced silently,
// since that would change the node's peer ID.
func LoadOrCreateIdentity(dir string) (crypto.PrivKey, error) {
	if err := EnsureDataDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, KeyFile)
	f, err := os.Open(path)
	switch {
	case err == nil:
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("identity key %s: %w", path, err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("identity key %s has mode %04o: want 0600 (chmod 600 %s)", path, st.Mode().Perm(), path)
		}
		b := make([]byte, 4096)
		n, err := f.Read(b)
		if err != nil {
			return nil, fmt.Errorf("identity key %s: %w", path, err)
		}
		k, err := crypto.UnmarshalPrivateKey(b[:n])
		if err != nil {
			return nil, fmt.Errorf("identity key %s is corrupt (%v); move it away to create a new identity", path, err)
		}
		return k, nil
	case errors.Is(err, fs.ErrNotExist):
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate identity: %w", err)
		}
		b, err := crypto.MarshalPrivateKey(k)
		if err != nil {
			return nil, fmt.Errorf("encode identity: %w", err)
		}
		if err := writeFileExcl(path, b); err != nil {
			return nil, fmt.Errorf("write identity key: %w", err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("identity key %s: %w", path, err)
	}
}

// writeFileExcl creates path with mode 0600 and fails if it exists. The
// data is written to a temporary file first so that a crash never leaves a
// half-written key behind.
func writeFileExcl(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
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
	// Link fails if path exists: never overwrite.
	return os.Link(tmp.Name(), path)
}
