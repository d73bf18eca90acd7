package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `overlayd testnet sim` runs a scenario, prints the summary and writes
// the same report.json for the same seed; bad values are usage errors.
func TestTestnetSim(t *testing.T) {
	dir := t.TempDir()
	var reports [2][]byte
	for i := range reports {
		var out, errb bytes.Buffer
		out1 := filepath.Join(dir, string(rune('a'+i)))
		if code := run([]string{"overlayd", "testnet", "sim", "--scenario", "recovery", "--seed", "4", "--out", out1}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "time to 99% / 100% attached") {
			t.Fatalf("no summary:\n%s", out.String())
		}
		var err error
		if reports[i], err = os.ReadFile(filepath.Join(out1, "report.json")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(reports[0], reports[1]) {
		t.Fatal("the same seed wrote different reports")
	}
	for _, args := range [][]string{
		{"--policy", "nope"},
		{"--scenario", "nope"},
		{"--clients", "-1"},
		{"--duration", "-1s"},
		{"--duration", "5s"},
		{"--supernodes", "70000"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"overlayd", "testnet", "sim"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// `overlayd testnet sim --policy all` runs every policy and compares them
// side by side: a report per policy and one table and two charts.
func TestTestnetSimAllPolicies(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"overlayd", "testnet", "sim", "--policy", "all", "--clients", "1000", "--supernodes", "10", "--duration", "2m", "--out", dir}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "policies.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"overlayd", "2010", "no-jitter", "no-busy-alternatives", "no-megas", "no-stagger"} {
		if !strings.Contains(string(md), "\n| "+name+" | ") {
			t.Errorf("policies.md has no row for %s:\n%s", name, md)
		}
		if _, err := os.Stat(filepath.Join(dir, name, "report.json")); err != nil {
			t.Errorf("no report for %s: %v", name, err)
		}
	}
	for _, f := range []string{"policies-attached.png", "policies-alive.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", f, err)
		}
	}
}

// `overlayd testnet sim plan` prints the fewest megas meeting the target
// with the margin; missing or bad flags are usage errors.
func TestTestnetSimPlan(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"overlayd", "testnet", "sim", "plan", "--clients", "1000", "--supernodes", "10", "--capacity", "112",
		"--target", "99%/20s", "--mega-capacity", "30,112", "--seeds", "2"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"8 megas of capacity 30: 99% attached at", "; 7 megas: 99% attached at", "headroom without megas"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	base := []string{"overlayd", "testnet", "sim", "plan"}
	full := []string{"--clients", "1000", "--supernodes", "10", "--capacity", "112"}
	for _, args := range [][]string{
		{"--clients", "1000", "--supernodes", "10"},
		append(full[:len(full):len(full)], "--target", "99"),
		append(full[:len(full):len(full)], "--target", "150%/60s"),
		append(full[:len(full):len(full)], "--target", "99%/-1s"),
		append(full[:len(full):len(full)], "--loss", "1"),
		append(full[:len(full):len(full)], "--seeds", "0"),
		append(full[:len(full):len(full)], "--mega-capacity", "0"),
		append(full[:len(full):len(full)], "extra"),
		append(full[:len(full):len(full)], "--parallel", "0"),
		append(full[:len(full):len(full)], "--max-memory", "lots"),
		append(full[:len(full):len(full)], "--max-memory", "-1GiB"),
	} {
		var out, errb bytes.Buffer
		if code := run(append(base[:len(base):len(base)], args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]struct {
		f float64
		d time.Duration
	}{"99%/60s": {0.99, time.Minute}, "0.995/2m": {0.995, 2 * time.Minute}, "100% / 30s": {1, 30 * time.Second}} {
		f, d, err := parseTarget(in)
		if err != nil || math.Abs(f-want.f) > 1e-12 || d != want.d {
			t.Errorf("parseTarget(%q) = %v, %v, %v; want %v, %v", in, f, d, err, want.f, want.d)
		}
	}
}

// --max-memory bounds the simulations at once: fewer than --parallel
// when they would not fit (said on stderr), none when one would not.
func TestTestnetSimPlanMemory(t *testing.T) {
	args := []string{"overlayd", "testnet", "sim", "plan", "--clients", "1000", "--supernodes", "10", "--capacity", "112",
		"--target", "99%/20s", "--mega-capacity", "30", "--seeds", "1", "--parallel", "8"}
	var out, errb bytes.Buffer
	if code := run(append(args, "--max-memory", "150MiB"), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "2 simulation(s) at once, not 8") {
		t.Errorf("no reduction said on stderr: %q", errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(append(args, "--max-memory", "10MiB"), &out, &errb); code == 0 || !strings.Contains(errb.String(), "raise --max-memory") {
		t.Errorf("exit %d with 10MiB: %s", code, errb.String())
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"8GiB": 8 << 30, "512MiB": 512 << 20, "1.5 GiB": 3 << 29, "2GB": 2e9, "4096": 4096, "10KiB": 10240} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "0", "-1MiB", "1e30"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q): no error", in)
		}
	}
}

// `overlayd testnet sim --scenario groups` runs seeds of the group
// simulator; --fault sets a fault kind's rate, and a bad one is a usage
// error naming what is wrong.
func TestTestnetSimGroups(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"overlayd", "testnet", "sim", "--scenario", "groups", "--seed", "3", "--seeds", "2", "--fault", "crash=1"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "groupsim: every seed passed") || !strings.Contains(out.String(), "crash ") {
		t.Fatalf("no summary with crashes:\n%s", out.String())
	}
	for _, tc := range []struct{ arg, want string }{
		{"bogus=1", `unknown kind "bogus"`},
		{"crash", "want KIND=RATE"},
		{"crash=2", "from 0 to 1"},
		{"crash=x", "from 0 to 1"},
	} {
		out.Reset()
		errb.Reset()
		if code := run([]string{"overlayd", "testnet", "sim", "--scenario", "groups", "--fault", tc.arg}, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("--fault %s: exit %d, %q; want 2 and %q", tc.arg, code, errb.String(), tc.want)
		}
	}
	if code := run([]string{"overlayd", "testnet", "sim", "--fault", "crash=1"}, &out, &errb); code != 2 {
		t.Errorf("--fault without --scenario groups: exit %d, want 2", code)
	}
}
