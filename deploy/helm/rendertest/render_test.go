// Package rendertest renders the Helm chart deploy/helm/baton with Helm's
// own engine, for 1, 3 and 5 nodes with and without TLS, and decodes every
// object strictly as its Kubernetes type (an unknown or misplaced field
// fails). It is a module of its own: Helm and the Kubernetes API types stay
// out of the server's build. .ci/platform.sh runs it.
package rendertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../baton"
	release   = "lk"
	namespace = "locks"
	fullname  = "lk-baton"
	headless  = "lk-baton-headless"
	domain    = headless + "." + namespace + ".svc.cluster.local"
)

func loadChart(t *testing.T) *chartv2.Chart {
	t.Helper()
	c, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return c
}

// render renders the chart with vals (YAML) over its defaults.
func render(t *testing.T, c *chartv2.Chart, vals string) (map[string]string, error) {
	t.Helper()
	var user map[string]any
	if err := yaml.Unmarshal([]byte(vals), &user); err != nil {
		t.Fatal(err)
	}
	rv, err := util.ToRenderValues(c, user, common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

// objects are the rendered objects, by kind and name.
type objects struct {
	statefulSet *appsv1.StatefulSet
	services    map[string]*corev1.Service
	pdb         *policyv1.PodDisruptionBudget
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	monitor     *monitoringv1.ServiceMonitor
	count       int
}

// decode splits the rendered files into documents and decodes each
// strictly (sigs.k8s.io/yaml's UnmarshalStrict: unknown fields and
// duplicate keys fail) as the type its apiVersion and kind name.
func decode(t *testing.T, files map[string]string) objects {
	t.Helper()
	o := objects{services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, file := range names {
		if strings.HasSuffix(file, "NOTES.txt") || strings.HasSuffix(file, ".tpl") {
			continue
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[file], -1) {
			if strings.TrimSpace(doc) == "" || isComments(doc) {
				continue
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s #%d: not YAML: %v\n%s", file, i, err, doc)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 StatefulSet":
				o.statefulSet = &appsv1.StatefulSet{}
				obj = o.statefulSet
			case "v1 Service":
				obj = &corev1.Service{}
			case "policy/v1 PodDisruptionBudget":
				o.pdb = &policyv1.PodDisruptionBudget{}
				obj = o.pdb
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "monitoring.coreos.com/v1 ServiceMonitor":
				o.monitor = &monitoringv1.ServiceMonitor{}
				obj = o.monitor
			default:
				t.Fatalf("%s #%d: %s %s: a kind the test does not know", file, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s): not a valid %s: %v\n%s", file, i, head.Kind, head.Kind, err, doc)
			}
			switch v := obj.(type) {
			case *corev1.Service:
				o.services[v.Name] = v
			case *corev1.Secret:
				o.secrets[v.Name] = v
			case *corev1.ConfigMap:
				o.configMaps[v.Name] = v
			}
			o.count++
		}
	}
	return o
}

func isComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// TestChartRenders: 1, 3 and 5 nodes, with and without TLS, render and
// decode strictly, and each object says what the cluster needs.
func TestChartRenders(t *testing.T) {
	c := loadChart(t)
	dashboard, err := os.ReadFile(filepath.Join("..", "..", "grafana", "baton.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3, 5} {
		for _, tls := range []bool{false, true} {
			t.Run(fmt.Sprintf("replicas=%d,tls=%v", n, tls), func(t *testing.T) {
				vals := fmt.Sprintf("replicas: %d\ntls: {enabled: %v}\nadminToken: {existingSecret: baton-admin}\nserviceMonitor: {enabled: true}\n", n, tls)
				files, err := render(t, c, vals)
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				o := decode(t, files)
				checkStatefulSet(t, o.statefulSet, n, tls)
				checkServices(t, o.services)
				checkPDB(t, o.pdb, n)
				checkMonitor(t, o.monitor, tls)
				cm := o.configMaps[fullname+"-dashboard"]
				switch {
				case cm == nil:
					t.Error("no dashboard ConfigMap")
				case cm.Data["baton.json"] != strings.TrimRight(string(dashboard), "\n"):
					t.Error("the dashboard ConfigMap's baton.json is not deploy/grafana/baton.json")
				case !json.Valid([]byte(cm.Data["baton.json"])):
					t.Error("the dashboard ConfigMap's baton.json is not JSON")
				case cm.Labels["grafana_dashboard"] != "1":
					t.Errorf("dashboard ConfigMap labels %v: no grafana_dashboard=1 for Grafana's sidecar", cm.Labels)
				}
				t.Logf("%d objects, each decoded strictly", o.count)
			})
		}
	}
}

func arg(args []string, flag string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func checkStatefulSet(t *testing.T, s *appsv1.StatefulSet, n int, tls bool) {
	t.Helper()
	if s == nil {
		t.Fatal("no StatefulSet")
	}
	if s.Name != fullname || s.Spec.Replicas == nil || int(*s.Spec.Replicas) != n {
		t.Errorf("StatefulSet %s with %v replicas, want %s with %d", s.Name, s.Spec.Replicas, fullname, n)
	}
	if s.Spec.ServiceName != headless {
		t.Errorf("serviceName %q, want the headless Service %q", s.Spec.ServiceName, headless)
	}
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel: the founders start together", s.Spec.PodManagementPolicy)
	}
	pod := s.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	ct := pod.Containers[0]
	args := ct.Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q, want baton serve", args)
	}
	// The pod's name is the node id, and every name resolves through the
	// headless Service.
	if v, _ := arg(args, "-node-id"); v != "$(POD_NAME)" {
		t.Errorf("-node-id=%q, want $(POD_NAME)", v)
	}
	if len(ct.Env) == 0 || ct.Env[0].Name != "POD_NAME" || ct.Env[0].ValueFrom == nil || ct.Env[0].ValueFrom.FieldRef == nil || ct.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("the first env var is %+v, want POD_NAME from metadata.name (args use it)", ct.Env[0])
	}
	var wantPeers []string
	for i := range n {
		wantPeers = append(wantPeers, fmt.Sprintf("%s-%d=%s-%d.%s:7072", fullname, i, fullname, i, domain))
	}
	if v, _ := arg(args, "-peers"); v != strings.Join(wantPeers, ",") {
		t.Errorf("-peers=%q, want %q", v, strings.Join(wantPeers, ","))
	}
	for flag, want := range map[string]string{
		"-raft-addr": "0.0.0.0:7072", "-raft-advertise": "$(POD_NAME)." + domain + ":7072",
		"-addr": "0.0.0.0:7070", "-advertise-addr": "$(POD_NAME)." + domain + ":7070",
		"-ops-addr": "0.0.0.0:7071", "-advertise-ops-addr": "$(POD_NAME)." + domain + ":7071",
		"-data-dir": "/data", "-admin-token-file": "/etc/baton/admin/token",
	} {
		if v, ok := arg(args, flag); v != want {
			t.Errorf("%s=%q (given: %v), want %q", flag, v, ok, want)
		}
	}
	tlsFlags := map[string]string{"-tls-cert": "/etc/baton/tls/$(POD_NAME)/tls.crt", "-tls-key": "/etc/baton/tls/$(POD_NAME)/tls.key", "-raft-tls-ca": "/etc/baton/tls/$(POD_NAME)/ca.crt"}
	for flag, want := range tlsFlags {
		v, ok := arg(args, flag)
		if ok != tls || (tls && v != want) {
			t.Errorf("tls %v: %s=%q (given: %v), want %q only with TLS", tls, flag, v, ok, want)
		}
	}
	// Probes on the ops port; the preStop delays SIGTERM, the handover.
	scheme := corev1.URISchemeHTTP
	if tls {
		scheme = corev1.URISchemeHTTPS
	}
	// Readiness: a member following the leader (/readyz alone is 200 on
	// the leader only, and rollouts and the budget count Ready pods).
	for _, pr := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"startup", "/healthz", ct.StartupProbe}, {"liveness", "/healthz", ct.LivenessProbe}, {"readiness", "/readyz?member", ct.ReadinessProbe}} {
		if p := pr.p; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != pr.path || p.HTTPGet.Port.String() != "ops" || p.HTTPGet.Scheme != scheme {
			t.Errorf("%s probe %+v, want GET %s on the ops port over %s", pr.name, p, pr.path, scheme)
		}
	}
	if ct.Lifecycle == nil || ct.Lifecycle.PreStop == nil || ct.Lifecycle.PreStop.Sleep == nil || ct.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Errorf("preStop %+v, want a sleep before SIGTERM", ct.Lifecycle)
	}
	grace := int64(0)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	if grace < 20 {
		t.Errorf("terminationGracePeriodSeconds %d: too short for the preStop, the handover drain and the linger", grace)
	}
	// Non-root, read-only, no capabilities; resources set.
	sc := ct.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v, want read-only root, no privilege escalation, every capability dropped", sc)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 || psc.FSGroup == nil || *psc.FSGroup != 65532 {
		t.Errorf("pod securityContext %+v, want non-root 65532 with fsGroup 65532 (the image's user)", psc)
	}
	if ct.Resources.Requests.Memory().IsZero() || ct.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want memory requests and limits", ct.Resources)
	}
	// Volumes: the data claim, the admin token, each node's TLS Secret
	// under its pod's name.
	if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("volumeClaimTemplates %+v, want one named data", s.Spec.VolumeClaimTemplates)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if v := vols["admin-token"]; v.Secret == nil || v.Secret.SecretName != "baton-admin" {
		t.Errorf("admin-token volume %+v, want Secret baton-admin", v)
	}
	tv, hasTLS := vols["tls"]
	if hasTLS != tls {
		t.Fatalf("tls volume present %v with tls %v", hasTLS, tls)
	}
	if tls {
		if tv.Projected == nil || len(tv.Projected.Sources) != n {
			t.Fatalf("tls volume %+v, want one Secret per node", tv)
		}
		for i, src := range tv.Projected.Sources {
			pod := fmt.Sprintf("%s-%d", fullname, i)
			if src.Secret == nil || src.Secret.Name != pod+"-tls" {
				t.Errorf("tls source %d: %+v, want Secret %s-tls", i, src.Secret, pod)
				continue
			}
			var paths []string
			for _, it := range src.Secret.Items {
				paths = append(paths, it.Key+"->"+it.Path)
			}
			if want := []string{"tls.crt->" + pod + "/tls.crt", "tls.key->" + pod + "/tls.key", "ca.crt->" + pod + "/ca.crt"}; !slices.Equal(paths, want) {
				t.Errorf("tls source %d: items %q, want %q", i, paths, want)
			}
		}
	}
}

func checkServices(t *testing.T, svcs map[string]*corev1.Service) {
	t.Helper()
	h := svcs[headless]
	if h == nil {
		t.Fatalf("no headless Service %s (have %v)", headless, slices.Collect(mapsKeys(svcs)))
	}
	if h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service: clusterIP %q, publishNotReadyAddresses %v; want None and true (the nodes find each other before they are Ready)", h.Spec.ClusterIP, h.Spec.PublishNotReadyAddresses)
	}
	ports := map[string]int32{}
	for _, p := range h.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["client"] != 7070 || ports["ops"] != 7071 || ports["raft"] != 7072 {
		t.Errorf("headless Service ports %v, want client 7070, ops 7071, raft 7072", ports)
	}
	if svcs[fullname] == nil {
		t.Errorf("no client Service %s", fullname)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func checkPDB(t *testing.T, p *policyv1.PodDisruptionBudget, n int) {
	t.Helper()
	if n == 1 {
		if p != nil {
			t.Error("a PodDisruptionBudget for one node: it would block every drain, and there is no quorum to keep")
		}
		return
	}
	if p == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != n/2+1 || p.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget minAvailable %v maxUnavailable %v, want minAvailable %d (a majority of %d)", p.Spec.MinAvailable, p.Spec.MaxUnavailable, n/2+1, n)
	}
}

func checkMonitor(t *testing.T, m *monitoringv1.ServiceMonitor, tls bool) {
	t.Helper()
	if m == nil {
		t.Fatal("no ServiceMonitor with serviceMonitor.enabled")
	}
	if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "ops" || m.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("ServiceMonitor endpoints %+v, want /metrics on the ops port", m.Spec.Endpoints)
	}
	ep := m.Spec.Endpoints[0]
	if tls != (ep.TLSConfig != nil) {
		t.Fatalf("ServiceMonitor tlsConfig %+v with tls %v", ep.TLSConfig, tls)
	}
	// Prometheus scrapes every pod with one server name: the one every
	// node's certificate carries, the client Service's.
	if tls && (ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != fullname+"."+namespace+".svc") {
		t.Errorf("ServiceMonitor serverName %v, want %s.%s.svc", ep.TLSConfig.ServerName, fullname, namespace)
	}
}

// TestChartRefuses: what cannot work does not render, with a message
// that names the value.
func TestChartRefuses(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct{ vals, want string }{
		{"replicas: 2\nadminToken: {existingSecret: a}", "replicas is 2: give 3 or 5"},
		{"replicas: 4\nadminToken: {existingSecret: a}", "replicas is 4: give 3 or 5"},
		{"replicas: 3", "adminToken.existingSecret"},
		{"adminToken: {create: true}", "adminToken.value is required"},
	} {
		_, err := render(t, c, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error %v, want one with %q", tc.vals, err, tc.want)
		}
	}
	// Without a ServiceMonitor or the dashboard, neither is rendered; a
	// created admin token is a Secret.
	files, err := render(t, c, "adminToken: {create: true, value: s3cret}\nserviceMonitor: {enabled: false}\ngrafanaDashboard: {enabled: false}")
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, files)
	if o.monitor != nil || len(o.configMaps) != 0 {
		t.Errorf("ServiceMonitor %v and %d ConfigMaps, want none when turned off", o.monitor != nil, len(o.configMaps))
	}
	if s := o.secrets[fullname+"-admin"]; s == nil || s.StringData["token"] != "s3cret" {
		t.Errorf("admin Secret %+v, want %s-admin with the token", s, fullname)
	}
}

// TestChartLints: helm lint's rules pass, with no warning.
func TestChartLints(t *testing.T) {
	vals := map[string]any{"adminToken": map[string]any{"existingSecret": "baton-admin"}}
	res := lint.RunAll(chartDir, vals, namespace)
	var msgs []string
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev {
			msgs = append(msgs, m.Error())
		}
	}
	if len(msgs) > 0 {
		t.Errorf("helm lint:\n%s", strings.Join(msgs, "\n"))
	}
}

// TestDashboardCopy: the chart's copy of the dashboard is
// deploy/grafana/baton.json (Helm reads files inside the chart only).
func TestDashboardCopy(t *testing.T) {
	a, err := os.ReadFile(filepath.Join("..", "..", "grafana", "baton.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "baton.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("deploy/helm/baton/dashboards/baton.json differs from deploy/grafana/baton.json: copy it again")
	}
}

// TestChartFlagsExist: every flag the StatefulSet gives baton serve, and
// every BATON_ variable it sets, is one that baton serve -help lists (the
// binary built from this repository), so a misspelt or removed flag fails
// here and not in a pod's crash loop.
func TestChartFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the baton binary; skipped in -short mode")
	}
	bin := filepath.Join(t.TempDir(), "baton")
	build := exec.Command("go", "build", "-o", bin, "./cmd/baton")
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/baton: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "serve", "-help").CombinedOutput()
	if !bytes.Contains(help, []byte("\n  -raft-advertise ")) {
		t.Fatalf("baton serve -help lists no -raft-advertise:\n%s", help)
	}
	files, err := render(t, loadChart(t), "replicas: 3\ntls: {enabled: true}\nadminToken: {existingSecret: a}")
	if err != nil {
		t.Fatal(err)
	}
	ct := decode(t, files).statefulSet.Spec.Template.Spec.Containers[0]
	for _, a := range ct.Args[1:] {
		name, _, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") || !bytes.Contains(help, []byte("\n  "+name+" ")) && !bytes.Contains(help, []byte("\n  "+name+"\n")) {
			t.Errorf("the chart gives %q, which baton serve -help does not list", a)
		}
	}
	for _, e := range ct.Env {
		if strings.HasPrefix(e.Name, "BATON_") && !bytes.Contains(help, []byte("$"+e.Name+")")) {
			t.Errorf("the chart sets %s, which baton serve -help does not list", e.Name)
		}
	}
}
