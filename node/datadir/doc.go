// Package datadir is a node's data directory (--data-dir) and the files
// the node itself keeps in it: the identity key (KeyFile) and the groups
// its client has joined (GroupsFile). Every file is written the same way,
// by one helper (writeFile): a temporary file of mode 0600 in the same
// directory, fsynced, then linked (a file that must never be replaced,
// the key) or renamed (a file rewritten, the groups) into place, and the
// directory fsynced, so that a crash leaves the old file or the new one,
// never a half-written one.
//
// The directory must be 0700 and the key 0600: a key or directory that
// others can reach is an error, never fixed or replaced silently, and
// neither is a damaged file (replacing the key would change the node's
// peer ID; dropping the groups file would leave the node's groups). The
// package holds no state and starts nothing; when to write is the node's
// decision. The supernode's store (supernode/store, store.db) lives in
// the same directory but keeps its own file.
package datadir
