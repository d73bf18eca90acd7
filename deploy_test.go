package overlayd_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/config"
)

// Files under deploy/ whose PromQL must name only metrics and labels the
// daemon registers.
const (
	dashboardFile = "deploy/grafana/overlayd.json"
	rulesFile     = "deploy/prometheus/overlayd-rules.yml"
)

// TestDashboardMetricsExist checks that every metric the Grafana dashboard
// and the alert rules query exists in the registries of a running
// supernode and a running ordinary node, with the labels the queries use,
// so that a renamed metric or label cannot silently empty a panel or
// disarm an alert.
func TestDashboardMetricsExist(t *testing.T) {
	known := daemonMetrics(t)
	for _, f := range []struct {
		name  string
		exprs func(testing.TB) []expr
	}{
		{dashboardFile, dashboardExprs},
		{rulesFile, func(tb testing.TB) []expr { return ruleExprs(tb, rulesFile) }},
	} {
		t.Run(f.name, func(t *testing.T) {
			exprs := f.exprs(t)
			if len(exprs) == 0 {
				t.Fatalf("%s: no PromQL expressions found", f.name)
			}
			refs := 0
			for _, e := range exprs {
				for _, r := range metricRefs(e.promql) {
					refs++
					if err := known.check(r); err != nil {
						t.Errorf("%s: %s: %v\n\texpr: %s", f.name, e.where, err, e.promql)
					}
				}
			}
			if refs == 0 {
				t.Fatalf("%s: no overlayd_ metric referenced", f.name)
			}
		})
	}
}

// TestDashboardMetricRefs pins the crude PromQL parsing the checks rely on.
func TestDashboardMetricRefs(t *testing.T) {
	for _, tc := range []struct {
		name, promql string
		want         []metricRef
	}{
		{"bare", `overlayd_directory_entries`, []metricRef{{name: "overlayd_directory_entries"}}},
		{"selector and variable", `sum by (semaphore) (rate(overlayd_supernode_semaphore_refused_total{job=~"$job", semaphore="relays"}[$__rate_interval]))`,
			[]metricRef{{name: "overlayd_supernode_semaphore_refused_total", matchers: []matcher{
				{label: "job", op: "=~", value: "$job"}, {label: "semaphore", op: "=", value: "relays", literal: true}}}}},
		{"two metrics, space before brace", `overlayd_supernode_semaphore_in_use {semaphore="attached_peers"} / overlayd_supernode_semaphore_max{semaphore="attached_peers"}`,
			[]metricRef{
				{name: "overlayd_supernode_semaphore_in_use", matchers: []matcher{{label: "semaphore", op: "=", value: "attached_peers", literal: true}}},
				{name: "overlayd_supernode_semaphore_max", matchers: []matcher{{label: "semaphore", op: "=", value: "attached_peers", literal: true}}}}},
		{"names in values are not metrics", `overlayd_supernode_records_refused_total{reason=~".*_unsigned|overlayd_x", a="}"}`,
			[]metricRef{{name: "overlayd_supernode_records_refused_total", matchers: []matcher{
				{label: "reason", op: "=~", value: ".*_unsigned|overlayd_x", literal: true}, {label: "a", op: "=", value: "}", literal: true}}}}},
		{"histogram bucket", `histogram_quantile(0.99, sum by (le) (rate(overlayd_supernode_fanout_latency_seconds_bucket[5m])))`,
			[]metricRef{{name: "overlayd_supernode_fanout_latency_seconds_bucket"}}},
		{"recording rule prefix is not a metric", `job:overlayd_x:rate5m`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := metricRefs(tc.promql); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("metricRefs(%s)\n got %+v\nwant %+v", tc.promql, got, tc.want)
			}
		})
	}
}

// registered are the metric families of the daemon: family name to label
// name to the label values seen.
type registered map[string]map[string][]string

// targetLabels are added by Prometheus to every series it scrapes.
var targetLabels = []string{"instance", "job"}

// check reports whether r names a registered family (a histogram's
// _bucket, _sum and _count series count as the family) with every label r
// matches on, and, for an equality matcher on a literal value, with that
// value (a semaphore, reason or outcome that is never exported matches
// nothing).
func (k registered) check(r metricRef) error {
	labels, ok := k[r.name]
	bucket := false
	if !ok {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(r.name, "_bucket"), "_sum"), "_count")
		if labels, ok = k[base]; !ok || base == r.name {
			return fmt.Errorf("metric %s is not registered by the daemon", r.name)
		}
		bucket = strings.HasSuffix(r.name, "_bucket")
	}
	for _, m := range r.matchers {
		if slices.Contains(targetLabels, m.label) || (bucket && m.label == "le") {
			continue
		}
		values, ok := labels[m.label]
		if !ok {
			return fmt.Errorf("metric %s has no label %q (its labels: %v)", r.name, m.label, slices.Sorted(maps.Keys(labels)))
		}
		if m.op == "=" && m.literal && !slices.Contains(values, m.value) {
			return fmt.Errorf("metric %s has no series with %s=%q (its values: %v)", r.name, m.label, m.value, values)
		}
	}
	return nil
}

// daemonMetrics starts a supernode and an ordinary node attached to it,
// each on a registry of its own, and returns the union of the families
// both registries gather. The client waits until it is attached, so that
// the families of an attached session are registered too.
func daemonMetrics(tb testing.TB) registered {
	tb.Helper()
	snReg, clReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	sn := startNode(tb, config.RoleSupernode, "", snReg)
	boot := fmt.Sprintf("%s/p2p/%s", sn.Host().Addrs()[0], sn.ID())
	cl := startNode(tb, config.RoleOrdinary, boot, clReg)
	// The ring's version label and the session's series appear once the
	// supernode has a ring and the client a session: wait for both.
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !hasSeries(tb, clReg, "overlayd_client_attached", 1) || !hasSeries(tb, snReg, "overlayd_ring_info", 1) {
		select {
		case <-deadline.C:
			tb.Fatalf("client %s not attached to supernode %s with a ring within 20s", cl.ID(), sn.ID())
		case <-tick.C:
		}
	}
	known := registered{}
	for _, reg := range []*prometheus.Registry{snReg, clReg} {
		mfs, err := reg.Gather()
		if err != nil {
			tb.Fatalf("gather: %v", err)
		}
		for _, mf := range mfs {
			labels := known[mf.GetName()]
			if labels == nil {
				labels = map[string][]string{}
				known[mf.GetName()] = labels
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if !slices.Contains(labels[lp.GetName()], lp.GetValue()) {
						labels[lp.GetName()] = append(labels[lp.GetName()], lp.GetValue())
					}
				}
			}
		}
	}
	if os.Getenv("OVERLAYD_DUMP_METRICS") != "" {
		for _, n := range slices.Sorted(maps.Keys(known)) {
			tb.Logf("%s %v", n, known[n])
		}
	}
	return known
}

// hasSeries reports whether reg has a gauge series of the family name
// with value v.
func hasSeries(tb testing.TB, reg *prometheus.Registry, name string, v float64) bool {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == v {
					return true
				}
			}
		}
	}
	return false
}

func startNode(tb testing.TB, role config.Role, boot string, reg *prometheus.Registry) *node.Node {
	tb.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	c := config.Default()
	c.DataDir = filepath.Join(tb.TempDir(), "data")
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Role = role
	c.Capacity = 10
	c.AnnounceInterval = 300 * time.Millisecond
	c.APIListen = config.APIOff
	if boot != "" {
		c.Bootstrap = []string{boot}
	}
	n, err := node.New(c, node.WithIdentity(key), node.WithRegistry(reg))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		n.Close()
		tb.Fatalf("start %s: %v", role, err)
	}
	tb.Cleanup(func() { n.Close() })
	return n
}

// expr is one PromQL expression and where it was found.
type expr struct{ where, promql string }

// dashboardExprs returns every target expression of the dashboard's panels
// (rows included) and the queries of its template variables.
func dashboardExprs(tb testing.TB) []expr {
	tb.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		tb.Fatal(err)
	}
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		tb.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []expr
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					tb.Errorf("%s: panel %q target %s has no expr", dashboardFile, p.Title, tg.RefID)
				}
				out = append(out, expr{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := ""
		switch x := v.Query.(type) {
		case string:
			q = x
		case map[string]any:
			q, _ = x["query"].(string)
		}
		out = append(out, expr{fmt.Sprintf("variable %q", v.Name), q})
	}
	return out
}

type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// ruleExprs returns the expr of every rule in a Prometheus rules file.
func ruleExprs(tb testing.TB, file string) []expr {
	tb.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	var out []expr
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if r.Expr == "" {
				tb.Errorf("%s: rule %s has no expr", file, name)
			}
			out = append(out, expr{fmt.Sprintf("group %s rule %s", g.Name, name), r.Expr})
		}
	}
	return out
}

// metricRef is one use of a metric in PromQL: its name and the label
// matchers of the selector braces right after it.
type metricRef struct {
	name     string
	matchers []matcher
}

// matcher is one label matcher of a selector. literal is false when the
// value uses a Grafana variable ($name, ${name}, [[name]]).
type matcher struct {
	label, op, value string
	literal          bool
}

var (
	metricRE  = regexp.MustCompile(`overlayd_[a-z0-9_]+`)
	matcherRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// metricRefs extracts the overlayd_ metrics of a PromQL expression and the
// label matchers in the selector braces that directly follow each. Names
// are looked for with quoted strings blanked out, so that a label value
// is never read as a metric. It is crude by design: label names in
// by()/without()/on() clauses and in label_ functions are not checked,
// and label values must be double-quoted.
func metricRefs(promql string) []metricRef {
	var out []metricRef
	blanked := blankQuoted(promql)
	for _, loc := range metricRE.FindAllStringIndex(blanked, -1) {
		if loc[0] > 0 && isIdent(blanked[loc[0]-1]) {
			continue // part of a longer identifier, not an overlayd_ metric
		}
		r := metricRef{name: blanked[loc[0]:loc[1]]}
		i := loc[1]
		for i < len(blanked) && strings.ContainsRune(" \t\n", rune(blanked[i])) {
			i++
		}
		if i < len(blanked) && blanked[i] == '{' {
			if end := strings.IndexByte(blanked[i:], '}'); end > 0 {
				sel := promql[i+1 : i+end] // same offsets: blanking keeps lengths
				for _, m := range matcherRE.FindAllStringSubmatch(sel, -1) {
					lit := !strings.Contains(m[3], "$") && !strings.Contains(m[3], "[[")
					r.matchers = append(r.matchers, matcher{label: m[1], op: m[2], value: m[3], literal: lit})
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

// blankQuoted replaces the contents of double- and single-quoted and
// backquoted strings with spaces, keeping every byte offset.
func blankQuoted(s string) string {
	b := []byte(s)
	quote := byte(0)
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quote == 0:
			if c == '"' || c == '\'' || c == '`' {
				quote = c
			}
		case c == quote:
			quote = 0
		case c == '\\' && quote != '`' && i+1 < len(b):
			b[i], b[i+1] = ' ', ' '
			i++
		default:
			b[i] = ' '
		}
	}
	return string(b)
}
