package release

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// deploy/compose/compose.yaml starts etcd and three agents from the image
// this package builds. Nothing here runs a container engine, so the test
// checks what the engine would be given: every agent's command line is
// one the image's cdc-agent accepts (the real binary parses it), the
// healthcheck is a command the image's cdcctl has, the agents reach etcd
// and each other by the names compose gives them, each has its own
// volume at the image's data directory and its own host port.
func TestTheComposeFileRunsThreeAgentsAndEtcd(t *testing.T) {
	t.Parallel()
	b := newBuild(t)
	body, err := os.ReadFile(filepath.Join(b.Root, "deploy", "compose", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type service struct {
		Image       string   `yaml:"image"`
		Command     []string `yaml:"command"`
		Ports       []string `yaml:"ports"`
		Volumes     []string `yaml:"volumes"`
		StopGrace   string   `yaml:"stop_grace_period"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	}
	var compose struct {
		Services map[string]service `yaml:"services"`
		Volumes  map[string]any     `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(body, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	etcd, ok := compose.Services["etcd"]
	if !ok || !contains(etcd.Command, "--advertise-client-urls=http://etcd:2379") || len(etcd.Healthcheck.Test) == 0 {
		t.Fatalf("the etcd service: %+v", etcd)
	}
	hostPorts := map[string]string{}
	for _, name := range []string{"capture-1", "capture-2", "capture-3"} {
		s, ok := compose.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if s.Image != "${CDCCTL_IMAGE:-"+ImageName+":latest}" {
			t.Errorf("%s runs image %q, not the one `make image` tags", name, s.Image)
		}
		if s.DependsOn["etcd"].Condition != "service_healthy" {
			t.Errorf("%s does not wait for a healthy etcd", name)
		}
		if d, err := time.ParseDuration(s.StopGrace); err != nil || d < time.Minute {
			t.Errorf("%s: stop_grace_period %q leaves no time for a graceful stop", name, s.StopGrace)
		}
		flags := map[string]string{}
		for _, a := range s.Command {
			k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			flags[k] = v
		}
		if flags["node-id"] != name || flags["etcd"] != "http://etcd:2379" {
			t.Errorf("%s: node-id %q, etcd %q", name, flags["node-id"], flags["etcd"])
		}
		_, port, _ := net.SplitHostPort(flags["addr"])
		if flags["advertise-addr"] != name+":"+port {
			t.Errorf("%s advertises %q; the others reach it as %s:%s", name, flags["advertise-addr"], name, port)
		}
		if len(s.Ports) != 1 || !strings.HasSuffix(s.Ports[0], ":"+port) || !strings.HasPrefix(s.Ports[0], "127.0.0.1:") {
			t.Errorf("%s publishes %v; want its API port %s on the host's loopback", name, s.Ports, port)
		} else if other, dup := hostPorts[s.Ports[0]]; dup {
			t.Errorf("%s and %s publish the same host port", name, other)
		} else {
			hostPorts[s.Ports[0]] = name
		}
		mounts := map[string]string{}
		for _, v := range s.Volumes {
			vol, dir, _ := strings.Cut(v, ":")
			if _, named := compose.Volumes[vol]; named {
				mounts[dir] = vol
			}
		}
		if vol := mounts[ImageDataDir]; vol != name || len(s.Volumes) != 2 {
			t.Errorf("%s keeps its state in %v; want a named volume of its own at %s", name, s.Volumes, ImageDataDir)
		}
		// file:// sinks are on one volume every agent mounts: verify
		// reads the whole sink on whichever agent answers.
		if mounts[ImageSinksDir] != "sinks" {
			t.Errorf("%s mounts %v; want the shared volume sinks at %s", name, s.Volumes, ImageSinksDir)
		}
		// The image's own binaries parse the command lines: an unknown
		// flag or a bad value fails before --help prints.
		if out, err := exec.Command(filepath.Join(b.Bin, "cdc-agent"), append(s.Command, "--help")...).CombinedOutput(); err != nil {
			t.Errorf("cdc-agent refuses %s's command %q: %v\n%s", name, s.Command, err, out)
		}
		hc := s.Healthcheck.Test
		if len(hc) < 2 || hc[0] != "CMD" || hc[1] != "/usr/local/bin/cdcctl" {
			t.Errorf("%s's healthcheck %q is not the image's cdcctl", name, hc)
			continue
		}
		if out, err := exec.Command(filepath.Join(b.Bin, "cdcctl"), append(hc[2:], "--help")...).CombinedOutput(); err != nil {
			t.Errorf("cdcctl refuses %s's healthcheck %q: %v\n%s", name, hc, err, out)
		}
	}
}
