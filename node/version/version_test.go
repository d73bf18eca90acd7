package version

import (
	"runtime/debug"
	"testing"
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
		want       Info
		str, agent string
	}{
		{name: "no build info", bi: nil,
			want: Info{Version: "devel"}, str: "devel", agent: "overlayd/devel"},
		{name: "go install of a tag",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/overlayd/overlayd", Version: "v1.2.3"}},
			want: Info{Version: "v1.2.3", Go: "go1.26.8"},
			str:  "v1.2.3 (go1.26.8)", agent: "overlayd/v1.2.3"},
		{name: "build in a dirty checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main:     debug.Module{Version: "v0.0.0-20260102030405-0123456789ab+dirty"},
				Settings: vcs("-buildmode", "exe", "vcs", "git", "vcs.revision", "0123456789abcdef", "vcs.time", "2026-01-02T03:04:05Z", "vcs.modified", "true")},
			want:  Info{Version: "v0.0.0-20260102030405-0123456789ab+dirty", Commit: "0123456789abcdef+dirty", Time: "2026-01-02T03:04:05Z", Go: "go1.26.8"},
			str:   "v0.0.0-20260102030405-0123456789ab+dirty (commit 0123456789abcdef+dirty at 2026-01-02T03:04:05Z, go1.26.8)",
			agent: "overlayd/v0.0.0-20260102030405-0123456789ab+dirty"},
		{name: "devel build of a clean tree",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: vcs("vcs.revision", "fedcba", "vcs.time", "2026-02-03T04:05:06Z", "vcs.modified", "false")},
			want: Info{Version: "devel", Commit: "fedcba", Time: "2026-02-03T04:05:06Z", Go: "go1.26.8"},
			str:  "devel (commit fedcba at 2026-02-03T04:05:06Z, go1.26.8)", agent: "overlayd/devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Read(tt.bi)
			if got != tt.want {
				t.Errorf("Read = %+v, want %+v", got, tt.want)
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

// TestBuild reads the test binary's own build info: a version is always
// named, "devel" at least.
func TestBuild(t *testing.T) {
	if v := Build(); v.Version == "" || v.UserAgent() != "overlayd/"+v.Version {
		t.Fatalf("Build() = %+v", v)
	}
}
