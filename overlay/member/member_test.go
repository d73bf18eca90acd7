package member

import (
	"testing"

	"github.com/overlayd/overlayd/overlay/dedup"
)

func TestDeliverOnceAndResumeFromTheLast(t *testing.T) {
	tests := []struct {
		name    string
		group   string
		pos     Pos
		from    string
		id      string
		deliver bool
		resume  Pos
	}{
		{"first", "g", Pos{5, 1}, "a", "1", true, Pos{5, 1}},
		{"the live copy of a replayed message", "g", Pos{5, 1}, "a", "1", false, Pos{5, 1}},
		{"next", "g", Pos{5, 2}, "a", "2", true, Pos{5, 2}},
		{"a retry numbered again by a new home", "g", Pos{6, 1}, "a", "2", false, Pos{5, 2}},
		{"a new epoch", "g", Pos{6, 2}, "b", "1", true, Pos{6, 2}},
		{"an older message that comes late is not delivered: the position never goes back", "g", Pos{5, 3}, "c", "1", false, Pos{6, 2}},
		{"nor one at the position", "g", Pos{6, 2}, "d", "1", false, Pos{6, 2}},
		{"the next after it is", "g", Pos{6, 3}, "c", "1", true, Pos{6, 3}},
	}
	gs := New(dedup.New(64))
	gs.Join("g")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gs.Deliver(tt.group, tt.pos, []byte(tt.from), []byte(tt.id)); got != tt.deliver {
				t.Fatalf("Deliver = %v, want %v", got, tt.deliver)
			}
			if p, ok := gs.Resume(tt.group); !ok || p != tt.resume {
				t.Fatalf("Resume = %v, %v; want %v", p, ok, tt.resume)
			}
		})
	}
}

func TestLeaveForgetsThePosition(t *testing.T) {
	gs := New(dedup.New(64))
	gs.Join("g")
	gs.Deliver("g", Pos{1, 1}, []byte("a"), []byte("1"))
	gs.Leave("g")
	if gs.Joined("g") {
		t.Fatal("still joined after Leave")
	}
	if _, ok := gs.Resume("g"); ok {
		t.Fatal("a left group kept its position: a later join would resume from it")
	}
	// Not joined: delivered (the caller refuses it first) but no position.
	gs.Deliver("g", Pos{1, 2}, []byte("a"), []byte("2"))
	if _, ok := gs.Resume("g"); ok {
		t.Fatal("a message of a group not joined gave it a position")
	}
}

func TestRestoreAndList(t *testing.T) {
	gs := New(dedup.New(64))
	gs.Restore("b", Pos{3, 4})
	gs.Restore("a", Pos{})
	got := gs.List()
	want := []State{{"a", Pos{}}, {"b", Pos{3, 4}}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if _, ok := gs.Resume("a"); ok {
		t.Fatal("a group restored with no position resumes")
	}
	if !Gap(0, true) || !Gap(2, false) || Gap(0, false) {
		t.Fatal("Gap: a complete replay reported, or a gap not")
	}
}
