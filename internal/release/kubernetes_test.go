package release

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// strict decodes one manifest into its Kubernetes type, refusing any
// field the type does not have (a typo, a field of another version).
func strict(t *testing.T, doc []byte, into any) {
	t.Helper()
	js, err := sigsyaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("not YAML: %v\n%s", err, doc)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("does not decode strictly into %T: %v\n%s", into, err, doc)
	}
}

// within says every label of sel is on labels.
func within(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// deploy/kubernetes/cdc-agent.yaml, with deploy/kustomization.yaml: every
// manifest decodes strictly into its k8s.io/api type, and they hold
// together: the pods are named as the captures and advertise their
// headless Service names; the Services and the PodDisruptionBudget
// select the StatefulSet's pods; the probes ask the agent's real
// endpoints on its API port over the TLS it serves; SIGTERM (the
// graceful stop) has as long as compose gives it; TLS and tokens come
// from Secrets mounted where the flags point; the state is on a volume
// claim at the image's data directory; the image's cdc-agent parses the
// command line; the ConfigMaps are made from the rules and the dashboard
// the other deployments use.
func TestTheKubernetesManifestsDecodeStrictlyAndHoldTogether(t *testing.T) {
	t.Parallel()
	b := newBuild(t)
	body, err := os.ReadFile(filepath.Join(b.Root, "deploy", "kubernetes", "cdc-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		sts      *appsv1.StatefulSet
		services = map[string]*corev1.Service{}
		pdb      *policyv1.PodDisruptionBudget
	)
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(body), -1) {
		var head struct {
			Kind string `yaml:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "":
			continue // the leading comment
		case "StatefulSet":
			sts = &appsv1.StatefulSet{}
			strict(t, []byte(doc), sts)
		case "Service":
			s := &corev1.Service{}
			strict(t, []byte(doc), s)
			services[s.Name] = s
		case "PodDisruptionBudget":
			pdb = &policyv1.PodDisruptionBudget{}
			strict(t, []byte(doc), pdb)
		default:
			t.Fatalf("a %s: the test knows no such kind; decode it strictly here too", head.Kind)
		}
	}
	if sts == nil || pdb == nil || len(services) != 2 {
		t.Fatalf("want a StatefulSet, a PodDisruptionBudget and two Services; have %v, %v, %d", sts != nil, pdb != nil, len(services))
	}
	pod := sts.Spec.Template
	if !within(sts.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods %v", sts.Spec.Selector.MatchLabels, pod.Labels)
	}
	headless := services[sts.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("the StatefulSet's service %q must be headless and publish pods that are not ready (a Draining capture still hands partitions over): %+v", sts.Spec.ServiceName, headless)
	}
	for name, s := range services {
		if !within(s.Spec.Selector, pod.Labels) {
			t.Errorf("Service %s selects %v, not the pods %v", name, s.Spec.Selector, pod.Labels)
		}
	}
	if !within(pdb.Spec.Selector.MatchLabels, pod.Labels) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("the PodDisruptionBudget must select the pods and allow one away: %+v", pdb.Spec)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if c.Image != ImageName+":latest" {
		t.Errorf("image %q, not the one `make image` tags", c.Image)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAME and POD_NAMESPACE must come from the pod: %v", env)
	}
	flags := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	var port int32
	for _, p := range c.Ports {
		if p.Name == "api" {
			port = p.ContainerPort
		}
	}
	if port == 0 || flags["addr"] != "0.0.0.0:"+itoa(port) {
		t.Errorf("--addr %q and the container's api port %d", flags["addr"], port)
	}
	if flags["node-id"] != "$(POD_NAME)" {
		t.Errorf("--node-id %q: the capture id must be the pod's name", flags["node-id"])
	}
	if want := "$(POD_NAME)." + headless.Name + ".$(POD_NAMESPACE).svc:" + itoa(port); flags["advertise-addr"] != want {
		t.Errorf("--advertise-addr %q, want %q (the name the headless Service gives the pod)", flags["advertise-addr"], want)
	}
	for _, s := range services {
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != "api" {
			t.Errorf("Service %s does not send to the api port: %+v", s.Name, s.Spec.Ports)
		}
	}
	tls := flags["tls-cert-file"] != ""
	for probe, p := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.String() != "api" || (p.HTTPGet.Scheme == corev1.URISchemeHTTPS) != tls {
			t.Errorf("the %s probe must ask the agent's %s on its api port, over HTTPS when it serves TLS: %+v", probe, probe, p)
		}
	}

	// SIGTERM is the graceful stop: as long as compose gives it.
	compose, err := os.ReadFile(filepath.Join(b.Root, "deploy", "compose", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	grace := regexp.MustCompile(`stop_grace_period: (\S+)`).FindSubmatch(compose)
	d, err := time.ParseDuration(string(grace[1]))
	if err != nil || pod.Spec.TerminationGracePeriodSeconds == nil || time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second < d {
		t.Errorf("terminationGracePeriodSeconds %v is shorter than compose's stop_grace_period %s", pod.Spec.TerminationGracePeriodSeconds, grace[1])
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != ImageUID {
		t.Errorf("the pod must run as the image's user %d: %+v", ImageUID, sc)
	}

	// Mounts: the data on a volume claim at the image's data directory;
	// the files the flags name on Secrets.
	secretAt := map[string]bool{}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
	}
	dataOnClaim := false
	for _, m := range c.VolumeMounts {
		if v, ok := volumes[m.Name]; ok && v.Secret != nil {
			secretAt[m.MountPath] = true
		}
		if claims[m.Name] && m.MountPath == ImageDataDir {
			dataOnClaim = true
		}
		if _, ok := volumes[m.Name]; !ok && !claims[m.Name] {
			t.Errorf("mount %s names no volume", m.Name)
		}
	}
	if !dataOnClaim {
		t.Errorf("the agent's state must be on a volume claim at %s", ImageDataDir)
	}
	for _, f := range []string{"tls-cert-file", "tls-key-file", "tls-ca-file", "token-auth-file"} {
		if !secretAt[filepath.Dir(flags[f])] {
			t.Errorf("--%s %q is not on a Secret's mount (%v)", f, flags[f], secretAt)
		}
	}

	// The image's cdc-agent parses the command line, the variables as
	// Kubernetes fills them in.
	args := make([]string, 0, len(c.Args)+1)
	for _, a := range c.Args {
		args = append(args, strings.NewReplacer("$(POD_NAME)", "cdc-agent-0", "$(POD_NAMESPACE)", "cdcctl").Replace(a))
	}
	if out, err := exec.Command(filepath.Join(b.Bin, "cdc-agent"), append(args, "--help")...).CombinedOutput(); err != nil {
		t.Errorf("cdc-agent refuses the StatefulSet's args %q: %v\n%s", args, err, out)
	}

	// The kustomization: strictly its fields; the manifests and the
	// files its ConfigMaps are made from exist.
	kbody, err := os.ReadFile(filepath.Join(b.Root, "deploy", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion       string   `json:"apiVersion"`
		Kind             string   `json:"kind"`
		Resources        []string `json:"resources"`
		GeneratorOptions struct {
			DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
		} `json:"generatorOptions"`
		ConfigMapGenerator []struct {
			Name    string   `json:"name"`
			Files   []string `json:"files"`
			Options struct {
				Labels map[string]string `json:"labels"`
			} `json:"options"`
		} `json:"configMapGenerator"`
	}
	strict(t, kbody, &k)
	if k.Kind != "Kustomization" || len(k.Resources) != 1 || k.Resources[0] != "kubernetes/cdc-agent.yaml" {
		t.Errorf("the kustomization's resources: %+v", k)
	}
	made := map[string]bool{}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			if _, err := os.Stat(filepath.Join(b.Root, "deploy", f)); err != nil {
				t.Errorf("ConfigMap %s from %s: %v", g.Name, f, err)
			}
			made[f] = true
		}
	}
	if !made["prometheus/alerts.yaml"] || !made["grafana/cdcctl.json"] {
		t.Errorf("the ConfigMaps must be made from the Prometheus rules and the Grafana dashboard: %v", made)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
