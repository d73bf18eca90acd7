package node

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
)

func TestVersion(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name       string
		bi         *debug.BuildInfo
		want       VersionInfo
		str, agent string
	}{
		{name: "no build info", bi: nil,
			want: VersionInfo{Version: "devel"}, str: "devel", agent: "overlayd/devel"},
		{name: "go install of a tag",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/overlayd/overlayd", Version: "v1.2.3"}},
			want: VersionInfo{Version: "v1.2.3", Go: "go1.26.8"},
			str:  "v1.2.3 (go1.26.8)", agent: "overlayd/v1.2.3"},
		{name: "build in a dirty checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main:     debug.Module{Version: "v0.0.0-20260102030405-0123456789ab+dirty"},
				Settings: vcs("-buildmode", "exe", "vcs", "git", "vcs.revision", "0123456789abcdef", "vcs.time", "2026-01-02T03:04:05Z", "vcs.modified", "true")},
			want:  VersionInfo{Version: "v0.0.0-20260102030405-0123456789ab+dirty", Commit: "0123456789abcdef+dirty", Time: "2026-01-02T03:04:05Z", Go: "go1.26.8"},
			str:   "v0.0.0-20260102030405-0123456789ab+dirty (commit 0123456789abcdef+dirty at 2026-01-02T03:04:05Z, go1.26.8)",
			agent: "overlayd/v0.0.0-20260102030405-0123456789ab+dirty"},
		{name: "devel build of a clean tree",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: vcs("vcs.revision", "fedcba", "vcs.time", "2026-02-03T04:05:06Z", "vcs.modified", "false")},
			want: VersionInfo{Version: "devel", Commit: "fedcba", Time: "2026-02-03T04:05:06Z", Go: "go1.26.8"},
			str:  "devel (commit fedcba at 2026-02-03T04:05:06Z, go1.26.8)", agent: "overlayd/devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Version(tt.bi)
			if got != tt.want {
				t.Errorf("Version = %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.str {
				t.Errorf("String = %q, want %q", s, tt.str)
			}
			if a := got.UserAgent(); a != tt.agent {
				t.Errorf("UserAgent = %q, want %q", a, tt.agent)
			}
		})
	}
}

// TestNodeAgentVersion checks that a node announces overlayd/<version>
// through identify: another node that connects to it learns it.
func TestNodeAgentVersion(t *testing.T) {
	a := startNode(t, testConfig(t, config.RoleOrdinary))
	b := startNode(t, testConfig(t, config.RoleOrdinary))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Host().Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	want := BuildVersion().UserAgent()
	var got any
	waitFor(t, 10*time.Second, "identify of a", func() bool {
		got, _ = b.Host().Peerstore().Get(a.ID(), "AgentVersion")
		return got == want
	})
	if st := a.Status(); st.Version != BuildVersion().Version {
		t.Errorf("status version %q, want %q", st.Version, BuildVersion().Version)
	}
}
