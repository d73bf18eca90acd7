package capacity

import (
	"math"
	"strings"
	"testing"
)

func TestDefaultLimits(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		want     Limits
	}{
		{name: "zero clamps to one", capacity: 0, want: Limits{1, 4, 2, 4}},
		{name: "negative clamps to one", capacity: -5, want: Limits{1, 4, 2, 4}},
		{name: "small", capacity: 10, want: Limits{10, 40, 20, 4}},
		{name: "fanout floor boundary", capacity: 40, want: Limits{40, 160, 80, 5}},
		{name: "supernode", capacity: 500, want: Limits{500, 2000, 1000, 62}},
		{name: "mega", capacity: 50000, want: Limits{50000, 200000, 100000, 6250}},
		{name: "saturates", capacity: math.MaxInt, want: Limits{MaxSlots, MaxSlots, MaxSlots, MaxSlots / 8}},
		{name: "relays saturate first", capacity: MaxSlots / 3, want: Limits{MaxSlots / 3, MaxSlots, MaxSlots / 3 * 2, MaxSlots / 3 / 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DefaultLimits(tt.capacity)
			if got != tt.want {
				t.Fatalf("DefaultLimits(%d) = %+v, want %+v", tt.capacity, got, tt.want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("DefaultLimits(%d) invalid: %v", tt.capacity, err)
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	ok := DefaultLimits(10)
	tests := []struct {
		name  string
		edit  func(*Limits)
		field string
	}{
		{"attached", func(l *Limits) { l.AttachedPeers = 0 }, "AttachedPeers"},
		{"relays", func(l *Limits) { l.RelaysInFlight = -1 }, "RelaysInFlight"},
		{"lookups", func(l *Limits) { l.LookupsInFlight = 0 }, "LookupsInFlight"},
		{"fanout", func(l *Limits) { l.FanoutJobs = 0 }, "FanoutJobs"},
		{"too large", func(l *Limits) { l.LookupsInFlight = MaxSlots + 1 }, "LookupsInFlight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := ok
			tt.edit(&l)
			err := l.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate = %v, want error naming %s", err, tt.field)
			}
			if _, err := NewSet(l); err == nil {
				t.Fatal("NewSet accepted invalid limits")
			}
		})
	}
}

func TestSet(t *testing.T) {
	l := DefaultLimits(8)
	set, err := NewSet(l)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{NameAttached, NameRelays, NameLookups, NameFanout}
	for i, s := range set.All() {
		if s.Name() != names[i] {
			t.Fatalf("All()[%d] = %q, want %q", i, s.Name(), names[i])
		}
	}
	if got := set.Limits(); got != l {
		t.Fatalf("Limits() = %+v, want %+v", got, l)
	}

	// Promotion to mega-supernode, then demotion below current use.
	for range 8 {
		set.Attached.TryAcquire()
	}
	mega := DefaultLimits(1000)
	if err := set.SetLimits(mega); err != nil {
		t.Fatal(err)
	}
	if got := set.Limits(); got != mega {
		t.Fatalf("after promotion Limits() = %+v, want %+v", got, mega)
	}
	if !set.Attached.TryAcquire() {
		t.Fatal("promotion did not admit a 9th peer")
	}
	if err := set.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	if set.Attached.InUse() != 9 {
		t.Fatal("demotion evicted attached peers")
	}
	if set.Attached.TryAcquire() {
		t.Fatal("demoted set admitted a peer over its limit")
	}
	if err := set.SetLimits(Limits{}); err == nil {
		t.Fatal("SetLimits accepted zero limits")
	}
	if got := set.Limits(); got != l {
		t.Fatalf("failed SetLimits changed limits to %+v", got)
	}
}
