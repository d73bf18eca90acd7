package testnet

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// recSN is one supernode as the sampler sees it.
type recSN struct {
	name       string
	kind       string // regular, mega, restarted
	n          *node.Node
	regularCap int
	live       bool // false once killed
	// draining marks a demoted mega handing its clients back: above its
	// regular capacity by design until the drain period ends, so not
	// counted as over capacity.
	draining bool
	peaks    [recPhases]recPeak
	// refused is the attached-peers semaphore's refusal count at the last
	// sample; refusedIn[p] the refusals counted by samples of phase p.
	refused   uint64
	refusedIn [recPhases]uint64
	health    []recHealthResult
}

// recPeak is a supernode's highest load in one phase.
type recPeak struct {
	Load     int     `json:"load"`
	Capacity int     `json:"capacity"`
	Ratio    float64 `json:"ratio"`
	AtS      float64 `json:"at_s"`
	// Over counts samples above capacity; OverDraining those of a demoted
	// mega handing back (expected, not a violation).
	Over         int `json:"samples_over_capacity"`
	OverDraining int `json:"samples_over_draining,omitempty"`
	at           time.Time
}

// recSample is one reading of the whole network.
type recSample struct {
	T        float64 `json:"t_s"` // seconds since the failure (negative before)
	Phase    string  `json:"phase"`
	Attached int     `json:"attached"`
	Fraction float64 `json:"fraction"`
	// OnMegas are clients attached to a (would-be or former) mega;
	// MegaExcess those above the megas' regular capacity.
	OnMegas    int `json:"on_megas"`
	MegaExcess int `json:"mega_excess"`
	// MaxRatio is the highest load/capacity of a live regular supernode;
	// MegaMaxRatio of a mega (its certificate's capacity while promoted).
	MaxRatio     float64 `json:"max_load_ratio"`
	MegaMaxRatio float64 `json:"mega_max_load_ratio"`
	ScanMs       float64 `json:"scan_ms"`
	at           time.Time
	phase        int
}

// recSampler reads every client's and supernode's Status every period.
type recSampler struct {
	clients []*node.Node
	megaIDs map[string]bool
	every   time.Duration
	notify  chan struct{}

	mu        sync.Mutex
	phase     int
	t0        time.Time
	sns       []*recSN
	samples   []recSample
	orphans   map[int]bool
	reattach  map[int]time.Time
	killedIDs map[string]bool
}

func newRecSampler(n *recNet, every time.Duration) *recSampler {
	s := &recSampler{clients: n.clients, megaIDs: recIDs(n.megas), every: every, notify: make(chan struct{}, 1),
		orphans: map[int]bool{}, reattach: map[int]time.Time{}, killedIDs: map[string]bool{}}
	for i, sn := range n.regs {
		s.add(sn, "regular", n.sc.Capacity, i)
	}
	for i, m := range n.megas {
		s.add(m, "mega", n.sc.MegaRegularCapacity, i)
	}
	return s
}

// add starts sampling a supernode.
func (s *recSampler) add(n *node.Node, kind string, regularCap, i int) *recSN {
	name := "sn" + strconv.Itoa(i)
	switch kind {
	case "mega":
		name = "mega" + strconv.Itoa(i)
	case "restarted":
		name += "-restarted"
	}
	sn := &recSN{name: name, kind: kind, n: n, regularCap: regularCap, live: true}
	s.mu.Lock()
	s.sns = append(s.sns, sn)
	s.mu.Unlock()
	return sn
}

// setPhase starts phase p.
func (s *recSampler) setPhase(rec *recRecorder, p int) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
	rec.phase.Store(int32(p))
}

// failure records the failure instant, the killed supernodes (no longer
// sampled) and the clients they orphaned.
func (s *recSampler) failure(t0 time.Time, killed []*recSN, orphans map[int]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t0 = t0
	s.orphans = orphans
	for _, sn := range killed {
		sn.live = false
		s.killedIDs[sn.n.ID().String()] = true
	}
}

// find returns the sampled supernode n.
func (s *recSampler) find(n *node.Node) *recSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range s.sns {
		if sn.n == n {
			return sn
		}
	}
	return nil
}

func (s *recSampler) setDraining(sns []*recSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range sns {
		sn.draining = true
	}
}

// run samples until ctx ends.
func (s *recSampler) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recLoad is a supernode's load: the larger of its sessions and its
// attached-peers semaphore (a slot is taken before the session exists).
func recLoad(st localapi.Status) (load int, refused uint64) {
	load = st.AttachedClients
	for _, sem := range st.Semaphores {
		if sem.Name == capacity.NameAttached {
			load = max(load, int(sem.InUse))
			refused = sem.Refused
		}
	}
	return load, refused
}

func (s *recSampler) sample() {
	s.mu.Lock()
	phase := s.phase
	var sns []*recSN
	for _, sn := range s.sns {
		if sn.live {
			sns = append(sns, sn)
		}
	}
	s.mu.Unlock()

	start := time.Now()
	att := make([]string, len(s.clients))
	for i, c := range s.clients {
		if a := c.Status().Attachment; a != nil {
			att[i] = a.Supernode
		}
	}
	type reading struct {
		load, capa int
		refused    uint64
	}
	rs := make([]reading, len(sns))
	for i, sn := range sns {
		st := sn.n.Status()
		load, refused := recLoad(st)
		rs[i] = reading{load, st.Capacity, refused}
	}
	smp := recSample{at: start, phase: phase, Phase: recPhaseNames[phase], ScanMs: float64(time.Since(start)) / float64(time.Millisecond)}

	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range att {
		if a == "" {
			continue
		}
		smp.Attached++
		if s.megaIDs[a] {
			smp.OnMegas++
		}
		if s.orphans[i] && !s.killedIDs[a] {
			if _, ok := s.reattach[i]; !ok {
				s.reattach[i] = start
			}
		}
	}
	smp.Fraction = float64(smp.Attached) / float64(max(len(s.clients), 1))
	for i, sn := range sns {
		r := rs[i]
		ratio := float64(r.load) / float64(max(r.capa, 1))
		if sn.kind == "mega" {
			smp.MegaExcess += max(0, r.load-sn.regularCap)
			smp.MegaMaxRatio = max(smp.MegaMaxRatio, ratio)
		} else {
			smp.MaxRatio = max(smp.MaxRatio, ratio)
		}
		if r.refused >= sn.refused {
			sn.refusedIn[phase] += r.refused - sn.refused
		}
		sn.refused = r.refused
		pk := &sn.peaks[phase]
		if r.load > r.capa {
			if sn.draining {
				pk.OverDraining++
			} else {
				pk.Over++
			}
		}
		if pk.at.IsZero() || ratio > pk.Ratio {
			pk.Load, pk.Capacity, pk.Ratio, pk.at = r.load, r.capa, ratio, start
		}
	}
	s.samples = append(s.samples, smp)
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// latest returns the last sample.
func (s *recSampler) latest() (recSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return recSample{}, false
	}
	return s.samples[len(s.samples)-1], true
}

// await waits until a sample taken after from satisfies cond, ctx ends or
// within passes; it returns that sample.
func (s *recSampler) await(ctx context.Context, from time.Time, within time.Duration, cond func(recSample) bool) (recSample, bool) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		if smp, ok := s.latest(); ok && !smp.at.Before(from) && cond(smp) {
			return smp, true
		}
		select {
		case <-ctx.Done():
			return recSample{}, false
		case <-s.notify:
		}
	}
}

// snapshot returns copies of the samples, the supernodes and the orphans'
// reattach times, with times made relative to the failure.
func (s *recSampler) snapshot() ([]recSample, []*recSN, map[int]time.Time, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]recSample(nil), s.samples...)
	for i := range out {
		out[i].T = recSince(s.t0, out[i].at)
	}
	for _, sn := range s.sns {
		for p := range sn.peaks {
			sn.peaks[p].AtS = recSince(s.t0, sn.peaks[p].at)
		}
	}
	re := make(map[int]time.Time, len(s.reattach))
	for k, v := range s.reattach {
		re[k] = v
	}
	return out, append([]*recSN(nil), s.sns...), re, s.t0
}

// recSince is t − t0 in seconds, rounded to milliseconds.
func recSince(t0, t time.Time) float64 {
	if t0.IsZero() || t.IsZero() {
		return 0
	}
	return float64(t.Sub(t0).Round(time.Millisecond)) / float64(time.Second)
}
