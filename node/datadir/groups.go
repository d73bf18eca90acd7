package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/overlayd/overlayd/node/client"
)

// The groups a node's client has joined, with the last message of each it
// delivered, are kept in <data-dir>/GroupsFile, so that a restarted daemon
// rejoins them and the groups' homes replay what it missed while it was
// down (within their replay logs' bounds).

const (
	// GroupsFile is the joined groups' file name in the data dir.
	GroupsFile = "groups.json"
	// MaxGroups bounds the groups file read back, in bytes: about 16
	// bytes per group name plus positions; 4 MiB is tens of thousands of
	// groups.
	MaxGroups = 4 << 20
)

// groupsFile is the groups file's content.
type groupsFile struct {
	Groups []client.GroupState `json:"groups"`
}

// LoadGroups reads the groups file of dir: nil when there is none. A file
// that is not what SaveGroups writes is an error naming it.
func LoadGroups(dir string) ([]client.GroupState, error) {
	path := filepath.Join(dir, GroupsFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, MaxGroups+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if b.Len() > MaxGroups {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a groups file (move it aside to start with no groups)", path, MaxGroups)
	}
	var st groupsFile
	dec := json.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: %w (move it aside to start with no groups)", path, err)
	}
	return st.Groups, nil
}

// SaveGroups writes the groups file of dir atomically (writeFile: a
// temporary file renamed over it), mode 0600.
func SaveGroups(dir string, groups []client.GroupState) error {
	b, err := json.MarshalIndent(groupsFile{groups}, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, GroupsFile), append(b, '\n'), true)
}
