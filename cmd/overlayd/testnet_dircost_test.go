package main

import (
	"bytes"
	"strings"
	"testing"
)

// `overlayd testnet sim dircost` prints both designs per tier size and the
// cost per refresh; bad sizes and intervals are usage errors.
func TestTestnetSimDirCost(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"overlayd", "testnet", "sim", "dircost", "--supernodes", "100"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"| 100 | today | 10s |", "| 100 | view | 10s |", "bytes received per refresh"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{{"--supernodes", "0"}, {"--supernodes", "2000000"}, {"--interval", "1ms"}, {"extra"}} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"overlayd", "testnet", "sim", "dircost"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
