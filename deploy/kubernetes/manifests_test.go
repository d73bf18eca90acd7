// Package kubernetes holds no code: its test checks the Kubernetes manifests
// beside it. It is a module of its own (go.mod here) so that the daemon's
// module does not depend on the Kubernetes API types.
//
// The manifests have been validated only by this test, which decodes them
// strictly into the Kubernetes API types and checks a few invariants; they
// have not been run on a cluster here.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// What the README and the manifests must agree on.
const (
	image         = "overlayd:local" // the daemon's image, as README.md names it
	imageName     = "overlayd"       // kustomization.yaml's images: entry
	namespace     = "overlayd"
	stsName       = "overlayd-supernode"
	serviceName   = "overlayd-supernode"
	seedConfigMap = "overlayd-seed"
	seedSecret    = "overlayd-seed-identity"
	dataDir       = "/data/node"
	readmeFile    = "../../README.md"
	readmeSection = "## Running on many hosts: Kubernetes"
	// The seed's bootstrap address, as every daemon container passes it.
	seedBootstrap = "/dns4/overlayd-supernode-0.overlayd-supernode.$(POD_NAMESPACE).svc.cluster.local/tcp/4101/p2p/$(SEED_PEER_ID)"
	// seedOnlyFile is applied once, by hand, before the rest.
	seedOnlyFile = "seed-identity.yaml"
)

// kustomization is the part of a kustomize.config.k8s.io/v1beta1
// Kustomization that these manifests use; decoding it strictly catches a
// misspelt field among those.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string   `json:"namespace"`
	Resources       []string `json:"resources"`
	Images          []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// newObject returns an empty object of the Go type for apiVersion/kind.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, true
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "batch/v1 Job":
		return &batchv1.Job{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		return &kustomization{}, true
	}
	return nil, false
}

// decodeStrict decodes one YAML document into obj as the API server would
// in strict mode: duplicate keys, unknown fields and fields in the wrong
// case are errors.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("strict decoding: %v", strict)
	}
	return nil
}

// docSep is a YAML document separator line.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits a YAML stream on its --- lines, dropping documents that
// hold only comments and blank lines.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSep.Split(string(b), -1) {
		empty := true
		for _, l := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

type object struct {
	file string
	obj  any
}

// decodeFile decodes every document of one manifest file strictly.
func decodeFile(name string, b []byte) ([]any, error) {
	var objs []any
	docs := splitDocs(b)
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no document", name)
	}
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s, document %d: %v", name, i+1, err)
		}
		obj, ok := newObject(tm.APIVersion, tm.Kind)
		if !ok {
			return nil, fmt.Errorf("%s, document %d: no Go type for apiVersion %q kind %q", name, i+1, tm.APIVersion, tm.Kind)
		}
		if err := decodeStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s, document %d (%s %s): %v", name, i+1, tm.APIVersion, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// loadAll decodes every .yaml file in this directory.
func loadAll(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if yml, _ := filepath.Glob("*.yml"); len(yml) > 0 {
		t.Fatalf("%v: name manifests *.yaml, which this test and kustomization.yaml cover", yml)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	var all []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeFile(f, b)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, o := range objs {
			all = append(all, object{f, o})
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return all
}

func only[T any](t *testing.T, all []object, file string) T {
	t.Helper()
	var found []T
	for _, o := range all {
		if v, ok := o.obj.(T); ok && (file == "" || o.file == file) {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T (file %q), found %d", zero, file, len(found))
	}
	return found[0]
}

// TestManifestsDecodeStrictly decodes every document of every manifest
// into its Kubernetes API type; an unknown or misspelt field fails.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, o := range loadAll(t) {
		t.Logf("%s: %T", o.file, o.obj)
	}
}

// TestStrictDecodingRejects pins that the decoding above is strict.
func TestStrictDecodingRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec:\n  maxUnavailable: 1\n  maxUnavailabel: 1\n",
		"nested unknown":  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          imagePullPolcy: Always\n",
		"wrong case":      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nData: {a: b}\n",
		"duplicate key":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"wrong type":      "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replicas: three}\n",
		"unknown kind":    "apiVersion: v1\nkind: Podd\nmetadata: {name: x}\n",
		"kustomize field": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n",
	} {
		if _, err := decodeFile(name, []byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	docs := splitDocs([]byte("# comment only\n---\na: 1\n---   \n\n---\nb: 2\n"))
	if len(docs) != 2 {
		t.Errorf("splitDocs: %d documents, want 2", len(docs))
	}
}

func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	if s.Empty() {
		t.Fatalf("empty selector %v selects everything", sel)
	}
	return s.Matches(labels.Set(l))
}

// daemonPods are the pod templates that run overlayd.
func daemonPods(t *testing.T, all []object) map[string]corev1.PodTemplateSpec {
	sts := only[*appsv1.StatefulSet](t, all, "")
	dep := only[*appsv1.Deployment](t, all, "")
	return map[string]corev1.PodTemplateSpec{"StatefulSet " + sts.Name: sts.Spec.Template, "Deployment " + dep.Name: dep.Spec.Template}
}

func TestSupernodeInvariants(t *testing.T) {
	all := loadAll(t)
	sts := only[*appsv1.StatefulSet](t, all, "")
	dep := only[*appsv1.Deployment](t, all, "")
	svc := only[*corev1.Service](t, all, "")
	pdb := only[*policyv1.PodDisruptionBudget](t, all, "")
	snLabels := sts.Spec.Template.Labels

	if sts.Name != stsName || sts.Spec.ServiceName != serviceName || svc.Name != serviceName {
		t.Errorf("StatefulSet %q with serviceName %q, Service %q: want %q, %q, %q (the seed's DNS name depends on them)",
			sts.Name, sts.Spec.ServiceName, svc.Name, stsName, serviceName, serviceName)
	}
	if !selects(t, sts.Spec.Selector, snLabels) {
		t.Errorf("the StatefulSet's selector does not select its own pods")
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q, want None (headless)", svc.Name, svc.Spec.ClusterIP)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses false: nodes could not reach a starting seed", svc.Name)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(snLabels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s does not select the supernode pods", svc.Name)
	}

	// PodDisruptionBudget: at most one supernode down, supernodes only.
	if mu := pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
		t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, want 1", pdb.Name, mu)
	}
	if pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %s: minAvailable set beside maxUnavailable", pdb.Name)
	}
	if !selects(t, pdb.Spec.Selector, snLabels) {
		t.Errorf("PodDisruptionBudget %s does not select the supernode pods %v", pdb.Name, snLabels)
	}
	if selects(t, pdb.Spec.Selector, dep.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %s selects the client pods too", pdb.Name)
	}

	// Identity: supernodes from their claim, clients from an emptyDir.
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("StatefulSet: want one volumeClaimTemplate named data")
	}
	var depData *corev1.Volume
	for i, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			depData = &dep.Spec.Template.Spec.Volumes[i]
		}
	}
	if depData == nil || depData.EmptyDir == nil {
		t.Errorf("Deployment: the data volume must be an emptyDir (one identity per pod)")
	}

	// The seed's pre-made claim: the name the StatefulSet gives pod 0's
	// claim, and the same spec, so that the StatefulSet adopts it.
	pvc := only[*corev1.PersistentVolumeClaim](t, all, seedOnlyFile)
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	if want := fmt.Sprintf("%s-%s-0", tmpl.Name, sts.Name); pvc.Name != want {
		t.Errorf("%s: claim %q, want %q", seedOnlyFile, pvc.Name, want)
	}
	if !slices.Equal(pvc.Spec.AccessModes, tmpl.Spec.AccessModes) ||
		!pvc.Spec.Resources.Requests.Storage().Equal(*tmpl.Spec.Resources.Requests.Storage()) {
		t.Errorf("%s: claim spec %v differs from the StatefulSet's template %v", seedOnlyFile, pvc.Spec, tmpl.Spec)
	}
}

// TestContainers checks every daemon container: image, probes, resources,
// bootstrap through the seed, the data dir, and env references.
func TestContainers(t *testing.T) {
	all := loadAll(t)
	for what, pod := range daemonPods(t, all) {
		if len(pod.Spec.Containers) != 1 {
			t.Errorf("%s: %d containers, want 1", what, len(pod.Spec.Containers))
		}
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			where := what + " container " + c.Name
			if c.Image != image {
				t.Errorf("%s: image %q, want %q (as README.md says)", where, c.Image, image)
			}
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Errorf("%s: want liveness and readiness probes", where)
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p != nil && p.Exec != nil && !slices.Equal(p.Exec.Command, []string{"/overlayd", "status", "--data-dir", dataDir}) {
					t.Errorf("%s: probe runs %q", where, p.Exec.Command)
				}
			}
			checkResources(t, where, c)
			env := map[string]string{}
			for _, e := range c.Env {
				// $(VAR) resolves only to variables defined before it.
				checkRefs(t, where+" env "+e.Name, e.Value, env)
				env[e.Name] = e.Value
			}
			if env["OVERLAYD_DATA_DIR"] != dataDir {
				t.Errorf("%s: OVERLAYD_DATA_DIR %q, want %q", where, env["OVERLAYD_DATA_DIR"], dataDir)
			}
			for _, a := range slices.Concat(c.Command, c.Args) {
				checkRefs(t, where+" args", a, env)
			}
			if f := flagValues(c.Args, "--bootstrap"); !slices.Equal(f, []string{seedBootstrap}) {
				t.Errorf("%s: --bootstrap %q, want %q", where, f, seedBootstrap)
			}
			if f := flagValues(c.Args, "--announce-addr"); len(f) == 0 || !strings.HasPrefix(f[0], "/ip4/$(POD_IP)/tcp/4101") {
				t.Errorf("%s: --announce-addr %q, want /ip4/$(POD_IP)/tcp/4101 first", where, f)
			}
		}
	}
	sts := only[*appsv1.StatefulSet](t, all, "")
	if f := flagValues(sts.Spec.Template.Spec.Containers[0].Args, "--role"); !slices.Equal(f, []string{"supernode"}) {
		t.Errorf("StatefulSet: --role %q, want supernode", f)
	}
	dep := only[*appsv1.Deployment](t, all, "")
	if f := flagValues(dep.Spec.Template.Spec.Containers[0].Args, "--role"); !slices.Equal(f, []string{"ordinary"}) {
		t.Errorf("Deployment: --role %q, want ordinary", f)
	}
	job := only[*batchv1.Job](t, all, seedOnlyFile)
	for _, c := range job.Spec.Template.Spec.Containers {
		checkResources(t, "Job "+job.Name+" container "+c.Name, c)
	}

	// The seed's peer ID is in the ConfigMap the containers read.
	cm := only[*corev1.ConfigMap](t, all, "")
	if cm.Name != seedConfigMap || cm.Data["peer-id"] == "" {
		t.Errorf("ConfigMap %s: want %s with a peer-id", cm.Name, seedConfigMap)
	}
}

// TestSeedSecretOnlyInJob checks that the seed's key is mounted into the
// one-off Job only, never into a long-running pod.
func TestSeedSecretOnlyInJob(t *testing.T) {
	all := loadAll(t)
	uses := func(spec corev1.PodSpec) bool {
		for _, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == seedSecret {
				return true
			}
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.Secret != nil && s.Secret.Name == seedSecret {
						return true
					}
				}
			}
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil && e.SecretRef.Name == seedSecret {
					return true
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == seedSecret {
					return true
				}
			}
		}
		return false
	}
	for what, pod := range daemonPods(t, all) {
		if uses(pod.Spec) {
			t.Errorf("%s mounts the seed's Secret %s", what, seedSecret)
		}
	}
	if job := only[*batchv1.Job](t, all, seedOnlyFile); !uses(job.Spec.Template.Spec) {
		t.Errorf("Job %s does not mount the Secret %s", job.Name, seedSecret)
	}
}

// TestNetworkPolicy: p2p from anywhere, metrics from Prometheus only.
func TestNetworkPolicy(t *testing.T) {
	all := loadAll(t)
	np := only[*networkingv1.NetworkPolicy](t, all, "")
	for what, pod := range daemonPods(t, all) {
		if !selects(t, &np.Spec.PodSelector, pod.Labels) {
			t.Errorf("NetworkPolicy %s does not cover the %s pods", np.Name, what)
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policyTypes %v, want [Ingress]", np.Spec.PolicyTypes)
	}
	open := map[string]bool{} // "4101/TCP" -> reachable from anywhere
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port == nil || p.Protocol == nil {
				t.Fatalf("a rule's port without number or protocol: %v", p)
			}
			key := fmt.Sprintf("%s/%s", p.Port.String(), *p.Protocol)
			switch {
			case len(r.From) == 0:
				open[key] = true
			case key == "9101/TCP":
				for _, peer := range r.From {
					if peer.PodSelector == nil || peer.PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" || peer.IPBlock != nil {
						t.Errorf("metrics port admitted from %v: want pods labelled app.kubernetes.io/name: prometheus only", peer)
					}
				}
			}
		}
		if len(r.Ports) == 0 {
			t.Errorf("an ingress rule without ports admits every port: %v", r)
		}
	}
	if !open["4101/TCP"] || !open["4101/UDP"] {
		t.Errorf("the p2p port 4101 (TCP and UDP) must be open to any source: %v", open)
	}
	if open["9101/TCP"] {
		t.Errorf("the metrics port is open to any source")
	}
}

// TestKustomizationAndReadme: kustomization.yaml lists every manifest but
// the one-off seed file, and the README names the image and the files.
func TestKustomizationAndReadme(t *testing.T) {
	all := loadAll(t)
	k := only[*kustomization](t, all, "kustomization.yaml")
	if k.Namespace != namespace {
		t.Errorf("kustomization namespace %q, want %q", k.Namespace, namespace)
	}
	files, _ := filepath.Glob("*.yaml")
	var want []string
	for _, f := range files {
		if f != "kustomization.yaml" && f != seedOnlyFile {
			want = append(want, f)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want %v", got, want)
	}
	if len(k.Images) != 1 || k.Images[0].Name != imageName || imageName+":"+k.Images[0].NewTag != image {
		t.Errorf("kustomization images %+v: want one entry for %s", k.Images, image)
	}
	ns := only[*corev1.Namespace](t, all, "")
	if ns.Name != namespace {
		t.Errorf("Namespace %q, want %q", ns.Name, namespace)
	}

	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := bytes.Cut(readme, []byte(readmeSection+"\n"))
	if !ok {
		t.Fatalf("%s has no section %q", readmeFile, readmeSection)
	}
	if i := bytes.Index(sec, []byte("\n## ")); i >= 0 {
		sec = sec[:i]
	}
	for _, s := range append([]string{image, "overlayd identity --data-dir", "not run on a cluster", seedOnlyFile, "kubectl apply -k deploy/kubernetes"}, want...) {
		if !bytes.Contains(sec, []byte(s)) {
			t.Errorf("README section %q does not mention %q", readmeSection, s)
		}
	}
}

func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		l, ok := c.Resources.Limits[r]
		if !ok || l.IsZero() {
			t.Errorf("%s: no %s limit", where, r)
		}
		q, ok := c.Resources.Requests[r]
		if !ok || q.IsZero() {
			t.Errorf("%s: no %s request", where, r)
		}
		if ok && q.Cmp(l) > 0 {
			t.Errorf("%s: %s request %s above the limit %s", where, r, q.String(), l.String())
		}
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkRefs fails on a $(VAR) that is not an earlier env var of the
// container: Kubernetes would leave it as literal text.
func checkRefs(t *testing.T, where, s string, env map[string]string) {
	t.Helper()
	for _, m := range varRef.FindAllStringSubmatch(s, -1) {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("%s: $(%s) is not an env var defined before it", where, m[1])
		}
	}
}

// flagValues returns the values of a flag given as "--flag value" or
// "--flag=value" in args.
func flagValues(args []string, flag string) []string {
	var v []string
	for i, a := range args {
		switch {
		case a == flag && i+1 < len(args):
			v = append(v, args[i+1])
		case strings.HasPrefix(a, flag+"="):
			v = append(v, strings.TrimPrefix(a, flag+"="))
		}
	}
	return v
}
