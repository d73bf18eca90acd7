package bench

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	buraksezer "github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
	groupcache "github.com/golang/groupcache/consistenthash"
	"github.com/serialx/hashring"
	stathat "stathat.com/c/consistent"

	"github.com/overlayd/overlayd/overlay/ring"
)

// Every implementation gets the same members (peer-ID-shaped strings),
// 160 points per member, and looks up the same pre-generated 16-byte keys
// (also pre-converted to strings for the APIs that take strings), hashing
// each key in the timed loop with its own default hash.
const (
	replicas = 160
	numKeys  = 1 << 16 // 1 MiB of keys: more than L2, cycled
)

var sizes = []int{100, 2048}

const base58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6f7665726c617964)) }

// memberIDs returns n Ed25519-peer-ID-shaped strings; the same as
// overlay/ring's benchmarks use.
func memberIDs(n int) []string {
	rng := newRand(1)
	ids := make([]string, n)
	for i := range ids {
		b := []byte("12D3KooW")
		for range 44 {
			b = append(b, base58[rng.IntN(len(base58))])
		}
		ids[i] = string(b)
	}
	return ids
}

// benchKeys returns numKeys random 16-byte keys and their string forms;
// the same keys as overlay/ring's benchmarks use.
func benchKeys() ([][]byte, []string) {
	rng := newRand(2)
	buf := make([]byte, numKeys*16)
	for i := 0; i < len(buf); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
	ks, ss := make([][]byte, numKeys), make([]string, numKeys)
	for i := range ks {
		ks[i] = buf[i*16 : (i+1)*16 : (i+1)*16]
		ss[i] = string(ks[i])
	}
	return ks, ss
}

// impl is one consistent-hashing library under test. build returns a
// lookup of key i of the shared key set; the call through a func value
// costs every implementation the same.
type impl struct {
	name  string
	build func(ids []string) func(i int) string
}

type xxHasher struct{}

func (xxHasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

type bMember string

func (m bMember) String() string { return string(m) }

var (
	keysOnce  sync.Once
	keyBytes  [][]byte
	keyString []string
)

func keys() ([][]byte, []string) {
	keysOnce.Do(func() { keyBytes, keyString = benchKeys() })
	return keyBytes, keyString
}

func burak(ids []string) *buraksezer.Consistent {
	ms := make([]buraksezer.Member, len(ids))
	for i, id := range ids {
		ms[i] = bMember(id)
	}
	c := buraksezer.New(ms, buraksezer.Config{
		Hasher:            xxHasher{},
		PartitionCount:    100 * len(ids),
		ReplicationFactor: replicas,
		Load:              1.25,
	})
	return c
}

var impls = []impl{
	{"overlayd", func(ids []string) func(int) string {
		ms := make([]ring.Member, len(ids))
		for i, id := range ids {
			ms[i] = ring.Member{ID: id, Weight: 1}
		}
		r, err := ring.New(ms, ring.WithPointsPerWeight(replicas))
		if err != nil {
			panic(err)
		}
		ks, _ := keys()
		return func(i int) string { return r.Lookup(ks[i]) }
	}},
	{"buraksezer", func(ids []string) func(int) string {
		c := burak(ids)
		ks, _ := keys()
		return func(i int) string { return c.LocateKey(ks[i]).String() }
	}},
	{"groupcache", func(ids []string) func(int) string {
		m := groupcache.New(replicas, crc32.ChecksumIEEE)
		m.Add(ids...)
		_, ss := keys()
		return func(i int) string { return m.Get(ss[i]) }
	}},
	{"stathat", func(ids []string) func(int) string {
		c := stathat.New()
		c.NumberOfReplicas = replicas
		c.Set(ids)
		_, ss := keys()
		return func(i int) string {
			s, _ := c.Get(ss[i])
			return s
		}
	}},
	{"serialx", func(ids []string) func(int) string {
		// serialx gives a node one point per unit of weight.
		w := make(map[string]int, len(ids))
		for _, id := range ids {
			w[id] = replicas
		}
		h := hashring.NewWithWeights(w)
		_, ss := keys()
		return func(i int) string {
			s, _ := h.GetNode(ss[i])
			return s
		}
	}},
}

var sink atomic.Int64

// built caches each implementation's ring per size for the process, with
// the heap it retained when first built: buraksezer.New sorts its whole
// ring once per member added and takes tens of seconds at 2048 members,
// and -count reruns BenchmarkLookup.
var (
	builtMu sync.Mutex
	built   = map[string]builtRing{}
)

type builtRing struct {
	lookup       func(i int) string
	heapPerPoint float64
}

func build(im impl, ids []string) builtRing {
	builtMu.Lock()
	defer builtMu.Unlock()
	name := fmt.Sprintf("%s/%d", im.name, len(ids))
	if br, ok := built[name]; ok {
		return br
	}
	keys() // allocated before the measurement
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	lookup := im.build(ids)
	runtime.GC()
	runtime.ReadMemStats(&after)
	br := builtRing{lookup, (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(len(ids)*replicas)}
	built[name] = br
	return br
}

// BenchmarkLookup times one owner lookup, key hashing included, serially
// and from GOMAXPROCS goroutines, and reports each structure's retained
// heap per point (members × 160), measured once when it was built.
//
// With -short it runs 100 members only, skipping the slow 2048-member
// builds: enough for CI's -benchtime=1x check that the benchmarks still run.
func BenchmarkLookup(b *testing.B) {
	for _, n := range sizes {
		if testing.Short() && n > 100 {
			continue
		}
		ids := memberIDs(n)
		for _, im := range impls {
			// Built inside b.Run, so that -bench filters skip the build.
			b.Run(fmt.Sprintf("members=%d/impl=%s/serial", n, im.name), func(b *testing.B) {
				br := build(im, ids)
				lookup := br.lookup
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					_ = lookup(i & (numKeys - 1))
					i++
				}
				b.ReportMetric(br.heapPerPoint, "heapB/point")
			})
			b.Run(fmt.Sprintf("members=%d/impl=%s/parallel", n, im.name), func(b *testing.B) {
				br := build(im, ids)
				lookup := br.lookup
				b.ReportAllocs()
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i, sum := int(next.Add(7919)), 0
					for pb.Next() {
						sum += len(lookup(i & (numKeys - 1)))
						i++
					}
					sink.Add(int64(sum))
				})
				b.ReportMetric(br.heapPerPoint, "heapB/point")
			})
		}
	}
}

// TestLookupsReturnMembers guards against a benchmark timing a lookup that
// fails early: every implementation must return members.
func TestLookupsReturnMembers(t *testing.T) {
	ids := memberIDs(100)
	valid := map[string]bool{}
	for _, id := range ids {
		valid[id] = true
	}
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			lookup := build(im, ids).lookup
			for i := range 1000 {
				if id := lookup(i); !valid[id] {
					t.Fatalf("lookup(%d) = %q, not a member", i, id)
				}
			}
		})
	}
}
