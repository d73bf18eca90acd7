package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/overlayd/overlayd/node/client"
)

// The groups a node's client has joined, with the last message of each it
// delivered, are kept in <data-dir>/groups.json, so that a restarted daemon
// rejoins them and the groups' homes replay what it missed while it was
// down (within their replay logs' bounds).

const (
	groupStateFile = "groups.json"
	// groupStateMax bounds the file read back: about 16 bytes per group
	// name plus positions; 4 MiB is tens of thousands of groups.
	groupStateMax = 4 << 20
	// groupStateEvery is how often the file is rewritten when it changed
	// (and once at Close): a crash loses at most this much progress, which
	// only means a longer replay.
	groupStateEvery = 5 * time.Second
)

// loadGroupState reads the groups file of dir: nil when there is none. A
// file that is not what saveGroupState writes is an error naming it.
func loadGroupState(dir string) ([]client.GroupState, error) {
	path := filepath.Join(dir, groupStateFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, groupStateMax+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if b.Len() > groupStateMax {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a groups file (move it aside to start with no groups)", path, groupStateMax)
	}
	var st struct {
		Groups []client.GroupState `json:"groups"`
	}
	dec := json.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: %w (move it aside to start with no groups)", path, err)
	}
	return st.Groups, nil
}

// saveGroupState writes the groups file of dir atomically (a temporary
// file renamed over it), mode 0600.
func saveGroupState(dir string, groups []client.GroupState) error {
	b, err := json.MarshalIndent(struct {
		Groups []client.GroupState `json:"groups"`
	}{groups}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, groupStateFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
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
	return os.Rename(tmp.Name(), filepath.Join(dir, groupStateFile))
}

// groupStateLoop rewrites the groups file when the client's groups or
// positions changed, and once more when ctx ends.
func (n *Node) groupStateLoop(ctx context.Context) {
	last := n.client.GroupStates()
	save := func() {
		cur := n.client.GroupStates()
		if slices.Equal(cur, last) {
			return
		}
		if err := saveGroupState(n.cfg.DataDir, cur); err != nil {
			n.log.Warn("saving the joined groups failed", "err", err)
			return
		}
		last = cur
	}
	t := time.NewTicker(groupStateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case <-t.C:
			save()
		}
	}
}
