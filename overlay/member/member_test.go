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

// TestStartIsWhereAResumeBegins: a member with no message yet resumes
// from where its supernode stood when it joined; the first delivery's
// position wins over it; it never makes a live message a copy (a lying
// supernode cannot make the member drop one); a leave forgets it.
func TestStartIsWhereAResumeBegins(t *testing.T) {
	g := New(dedup.New(64))
	g.Start("chat", Pos{Epoch: 3, Seq: 9})
	if _, ok := g.Resume("chat"); ok {
		t.Fatal("a start was taken for a group not joined")
	}
	g.Join("chat")
	g.Start("chat", Pos{Epoch: 3, Seq: 9})
	if p, ok := g.Resume("chat"); !ok || p != (Pos{Epoch: 3, Seq: 9}) {
		t.Fatalf("Resume %v %v, want 3.9", p, ok)
	}
	g.Start("chat", Pos{Epoch: 99, Seq: 1}) // a lie, or a later notice
	if !g.Deliver("chat", Pos{Epoch: 3, Seq: 10}, []byte("a"), []byte("1")) {
		t.Fatal("a live message after a start was not delivered")
	}
	if p, _ := g.Resume("chat"); p != (Pos{Epoch: 3, Seq: 10}) {
		t.Fatalf("Resume %v, want the delivered 3.10", p)
	}
	g.Leave("chat")
	g.Join("chat")
	if _, ok := g.Resume("chat"); ok {
		t.Fatal("a leave kept the start")
	}
}

// TestSentJoinResumesFromTheLogsStart: a join that reached a session but
// was never told where it starts resumes from the zero position (the
// home's whole log) on the next session, not afresh (groupsim seed 2020).
func TestSentJoinResumesFromTheLogsStart(t *testing.T) {
	g := New(dedup.New(64))
	g.Sent("chat")
	if _, ok := g.Resume("chat"); ok {
		t.Fatal("a group not joined resumes")
	}
	g.Join("chat")
	if _, ok := g.Resume("chat"); ok {
		t.Fatal("a join no session took asks for a replay")
	}
	g.Sent("chat")
	if p, ok := g.Resume("chat"); !ok || p != (Pos{}) {
		t.Fatalf("Resume %v %v, want the zero position", p, ok)
	}
	g.Start("chat", Pos{Epoch: 3, Seq: 9})
	if p, ok := g.Resume("chat"); !ok || p != (Pos{Epoch: 3, Seq: 9}) {
		t.Fatalf("Resume %v %v, want the start 3.9", p, ok)
	}
	g.Leave("chat")
	g.Join("chat")
	if _, ok := g.Resume("chat"); ok {
		t.Fatal("a leave kept the sent join")
	}
}
