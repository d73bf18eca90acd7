package group

import (
	"errors"
	"slices"
	"testing"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Fakes of the core's ports for unit tests: a ring of fixed members, a
// net and a local side that record what they are given, a log in memory.

type fakeRing struct {
	home    string
	cluster []string
	// others are the supernodes on the ring besides the cluster.
	others []string
}

func (r fakeRing) Home(string) (string, bool) { return r.home, r.home != "" }
func (r fakeRing) Cluster(string) []string    { return r.cluster }
func (r fakeRing) SyncPeers(string) []string  { return r.cluster }
func (r fakeRing) Has(p string) bool {
	return slices.Contains(r.cluster, p) || slices.Contains(r.others, p)
}

type sent struct {
	to string
	f  *pb.RelayFrame
}

type fakeNet struct{ sent []sent }

func (n *fakeNet) Send(to string, f *pb.RelayFrame) bool {
	n.sent = append(n.sent, sent{to, f})
	return true
}
func (n *fakeNet) SendGroup(to string, f *pb.RelayFrame) bool { return n.Send(to, f) }

type fakeLocal struct {
	results []*pb.Result
	resumed []*pb.Resumed
}

func (l *fakeLocal) Attached(string) bool             { return true }
func (l *fakeLocal) Join(string, string)              {}
func (l *fakeLocal) Leave(string, string)             {}
func (l *fakeLocal) Fanout(*pb.GroupMessage)          {}
func (l *fakeLocal) Deliver(string, *pb.GroupMessage) {}
func (l *fakeLocal) ToClient(_ string, f *pb.SessionFrame) {
	if r := f.GetResult(); r != nil {
		l.results = append(l.results, r)
	}
	if r := f.GetResumed(); r != nil {
		l.resumed = append(l.resumed, r)
	}
}

type okVerifier struct{}

func (okVerifier) VerifyPublish([]byte, string, string, []byte) error { return nil }
func (okVerifier) VerifyMembership(_ []byte, _, _ string) (Claim, error) {
	return Claim{}, errors.New("no claims in this test")
}
func (okVerifier) VerifyStamp(*pb.GroupMessage, string) error                 { return nil }
func (okVerifier) OpenGroupMessage(*pb.GroupMessage, func(string) bool) error { return nil }

type fakeSigner struct{}

func (fakeSigner) Stamp(string, uint64, uint64, []byte) ([]byte, error) { return []byte("stamp"), nil }

type freeSlots struct{}

func (freeSlots) TryAcquire() bool { return true }
func (freeSlots) Release() error   { return nil }

// memLog is a replay log in memory; fail makes every append fail.
type memLog struct {
	fail bool
	logs map[string][]Entry
}

func (l *memLog) AppendReplay(g string, e Entry) error {
	if l.fail {
		return errors.New("disk full")
	}
	if l.logs == nil {
		l.logs = map[string][]Entry{}
	}
	es := l.logs[g]
	if len(es) > 0 && !(Pos{e.Epoch, e.Seq}).After(Pos{es[len(es)-1].Epoch, es[len(es)-1].Seq}) {
		return nil
	}
	l.logs[g] = append(es, e)
	return nil
}

func (l *memLog) ReplayAfter(g string, after Pos, limit int) ([]Entry, Pos, bool) {
	es := l.logs[g]
	if len(es) == 0 {
		return nil, Pos{}, false
	}
	var out []Entry
	for _, e := range es {
		if (Pos{e.Epoch, e.Seq}).After(after) && (limit <= 0 || len(out) < limit) {
			out = append(out, e)
		}
	}
	return out, Pos{es[0].Epoch, es[0].Seq}, true
}

func (l *memLog) ReplayLast(g string) (Pos, bool) {
	es := l.logs[g]
	if len(es) == 0 {
		return Pos{}, false
	}
	return Pos{es[len(es)-1].Epoch, es[len(es)-1].Seq}, true
}

// newTestCore is a core named "self", home of every group, with replicas
// r1 and r2; log may be nil (no replay log).
func newTestCore(t testing.TB, log *memLog) *Core {
	t.Helper()
	cfg := Config{Self: "self", Ring: fakeRing{home: "self", cluster: []string{"self", "r1", "r2"}},
		Net: &fakeNet{}, Local: &fakeLocal{}, Verifier: okVerifier{}, Signer: fakeSigner{}, Fanout: freeSlots{}}
	if log != nil {
		cfg.Replay = log
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
