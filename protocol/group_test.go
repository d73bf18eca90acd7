package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckGroupName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"team", true},
		{"ops/alerts #1", true},
		{"채팅방", true},
		{strings.Repeat("g", MaxGroupName), true},
		{"", false},
		{strings.Repeat("g", MaxGroupName+1), false},
		{"nul\x00inside", false},
		{"new\nline", false},
		{"tab\there", false},
		{"bad\xffutf8", false},
		{"zero\u200bwidth", false},
		{"bidi\u202eoverride", false},
		{" leading", false},
		{"trailing ", false},
		{"no\u00a0break", false},
	} {
		err := CheckGroupName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckGroupName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrGroupName) {
			t.Errorf("CheckGroupName(%q) = %v, not an ErrGroupName", tc.name, err)
		}
	}
}

func FuzzCheckGroupName(f *testing.F) {
	for _, s := range []string{"team", "", "a\x00b", "채팅방", " x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckGroupName(s) == nil {
			if len(s) == 0 || len(s) > MaxGroupName || strings.ContainsAny(s, "\x00\n\r\t") {
				t.Fatalf("accepted %q", s)
			}
		}
	})
}
