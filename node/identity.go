package node

import (
	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overlayd/overlayd/node/datadir"
)

// The data dir and the identity key in it are package node/datadir's;
// these forwards keep the names cmd/overlayd uses.

// KeyFile is the identity key's file name in the data dir.
const KeyFile = datadir.KeyFile

// EnsureDataDir creates dir with mode 0700 if it is missing, and refuses one
// that others can read or write (datadir.Ensure).
func EnsureDataDir(dir string) error { return datadir.Ensure(dir) }

// LoadOrCreateIdentity returns the node's Ed25519 key from dir/KeyFile,
// creating it (0600) on first use; an existing key that is unreadable,
// corrupt or readable by others is an error, never replaced
// (datadir.LoadOrCreateKey).
func LoadOrCreateIdentity(dir string) (crypto.PrivKey, error) {
	return datadir.LoadOrCreateKey(dir)
}
