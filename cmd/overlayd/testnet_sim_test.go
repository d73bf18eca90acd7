package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
