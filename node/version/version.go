package version

import (
	"runtime/debug"
	"strings"
)

// Info is what a build of overlayd says about itself: the module
// version, the VCS commit and time it was built from, and the Go toolchain.
// It comes from the build info the Go linker embeds (runtime/debug), which
// `go install`, `go build` in a git checkout (-buildvcs=auto) and the
// testnet image's CGO_ENABLED=0 build all carry.
type Info struct {
	// Version is the module version (v1.2.3, or a pseudo-version such as
	// v0.0.0-20260102030405-abcdef012345+dirty for a build in a checkout),
	// or "devel" when the build records none.
	Version string `json:"version"`
	// Commit is the VCS revision, with "+dirty" when the tree had
	// uncommitted changes; empty when the build records none.
	Commit string `json:"commit"`
	// Time is the commit's time (RFC 3339, UTC), vcs.time: the build time
	// a reproducible build records (the wall clock at link time it does
	// not); empty when the build records none.
	Time string `json:"time"`
	// Go is the toolchain that built the binary (go1.26.8).
	Go string `json:"go"`
}

// develVersion stands for a build without a module version.
const develVersion = "devel"

// Read reads a build's version from its build info; bi may be nil (no
// build info). It is a pure function, so a made-up BuildInfo tests it.
func Read(bi *debug.BuildInfo) Info {
	v := Info{Version: develVersion}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	v.Go = bi.GoVersion
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && v.Commit != "" {
		v.Commit += "+dirty"
	}
	return v
}

// Build is the running binary's version.
func Build() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Read(nil)
	}
	return Read(bi)
}

// String is the one-line form `overlayd version` prints after
// "overlayd version ": the version, then in parentheses what else is known,
// e.g. "v1.2.3 (commit 0123abcd+dirty at 2026-01-02T03:04:05Z, go1.26.8)".
func (v Info) String() string {
	var more []string
	switch {
	case v.Commit != "" && v.Time != "":
		more = append(more, "commit "+v.Commit+" at "+v.Time)
	case v.Commit != "":
		more = append(more, "commit "+v.Commit)
	case v.Time != "":
		more = append(more, "at "+v.Time)
	}
	if v.Go != "" {
		more = append(more, v.Go)
	}
	if len(more) == 0 {
		return v.Version
	}
	return v.Version + " (" + strings.Join(more, ", ") + ")"
}

// UserAgent is the libp2p agent version the node's host announces through
// identify: "overlayd/<version>".
func (v Info) UserAgent() string {
	return "overlayd/" + v.Version
}
