package datadir

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

// maxKey bounds the key file read back; a marshalled Ed25519 key is 68
// bytes.
const maxKey = 4096

// LoadOrCreateKey returns the node's Ed25519 key from dir/KeyFile,
// creating it (0600, and dir with Ensure) on first use. An existing key
// that is unreadable, corrupt or readable by others is an error: it is
// never replaced silently, since that would change the node's peer ID.
func LoadOrCreateKey(dir string) (crypto.PrivKey, error) {
	if err := Ensure(dir); err != nil {
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
		b := make([]byte, maxKey)
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
		if err := writeFile(path, b, false); err != nil {
			return nil, fmt.Errorf("write identity key: %w", err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("identity key %s: %w", path, err)
	}
}
