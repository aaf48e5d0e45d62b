package release

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

const testVersion = "1.2.3-rc.1"

// built holds the binaries of this platform, built once for every test.
var built struct {
	dir string
	err error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cdcctl-release-")
	if err != nil {
		panic(err)
	}
	built.dir = dir
	built.err = BuildBinaries(context.Background(), filepath.Join("..", ".."), dir, runtime.GOARCH, testVersion, "0123456789abcdef")
	code := m.Run()
	os.RemoveAll(dir)
	if packages.build.Out != "" {
		os.RemoveAll(packages.build.Out)
	}
	os.Exit(code)
}

func newBuild(t *testing.T) Build {
	t.Helper()
	if built.err != nil {
		t.Fatal(built.err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return Build{Root: root, Bin: built.dir, Out: t.TempDir(), Version: "v" + testVersion, Arch: runtime.GOARCH,
		Created: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), Stored: true}
}

// The image archive is what `docker load` and `podman load` take: an OCI
// layout whose image runs cdc-agent as a non-root user, with cdcctl
// beside it, both runnable; and docker's manifest.json naming the same
// blobs. The same inputs give the same bytes.
func TestTheImageRunsBothBinariesAsANonRootUser(t *testing.T) {
	t.Parallel()
	b := newBuild(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive, err := b.Image(ca)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	untar(t, archive, dir)
	for _, f := range []string{"oci-layout", "index.json", "manifest.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("the archive lacks %s", f)
		}
	}

	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/library/cdcctl:"+testVersion {
		t.Fatalf("index: %+v", im.Manifests)
	}
	img, err := lp.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/cdc-agent" || c.User != "65532:65532" ||
		c.WorkingDir != ImageDataDir || cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Fatalf("image config: entrypoint %q, user %q, workdir %q, platform %s/%s", c.Entrypoint, c.User, c.WorkingDir, cfg.OS, cfg.Architecture)
	}
	if _, ok := c.ExposedPorts["8301/tcp"]; !ok || !contains(c.Env, "CDC_AGENT_DATA_DIR="+ImageDataDir) ||
		c.Labels["org.opencontainers.image.version"] != testVersion || c.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Fatalf("image config: ports %v, env %v, labels %v", c.ExposedPorts, c.Env, c.Labels)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	files := untarTo(t, rc, root)
	rc.Close()
	for _, bin := range Binaries {
		h := files["usr/local/bin/"+bin]
		if h == nil || h.Mode != 0o755 || h.Uid != 0 {
			t.Fatalf("/usr/local/bin/%s in the image: %+v", bin, h)
		}
		// The binary the image holds runs, and is the version built.
		out, err := exec.Command(filepath.Join(root, "usr/local/bin", bin), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), testVersion) {
			t.Fatalf("%s --version from the image: %v: %s", bin, err, out)
		}
	}
	if h := files["var/lib/cdc-agent"]; h == nil || h.Typeflag != tar.TypeDir || h.Uid != ImageUID {
		t.Fatalf("the data directory is not the image user's: %+v", h)
	}
	// A volume mounted there (compose's shared sinks) takes this owner.
	if h := files["var/lib/cdc-agent/sinks"]; h == nil || h.Typeflag != tar.TypeDir || h.Uid != ImageUID {
		t.Fatalf("the sinks directory is not the image user's: %+v", h)
	}
	if h := files["tmp"]; h == nil || h.Mode != 0o1777 {
		t.Fatalf("/tmp: %+v", h)
	}
	for _, f := range []string{"etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt", "usr/share/doc/cdcctl/LICENSE"} {
		if files[f] == nil {
			t.Fatalf("the image lacks /%s", f)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), ":65532:65532:") {
		t.Fatalf("/etc/passwd has no user 65532:\n%s", passwd)
	}

	// docker load reads manifest.json: its config and layer are blobs
	// of the archive, named by their digests.
	var dm []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	body, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err := json.Unmarshal(body, &dm); err != nil || len(dm) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, body)
	}
	if !contains(dm[0].RepoTags, "cdcctl:"+testVersion) || !contains(dm[0].RepoTags, "cdcctl:latest") || len(dm[0].Layers) != 1 {
		t.Fatalf("manifest.json: %+v", dm[0])
	}
	for _, blob := range append([]string{dm[0].Config}, dm[0].Layers...) {
		if got := fileSHA256(t, filepath.Join(dir, blob)); "blobs/sha256/"+got != blob {
			t.Fatalf("manifest.json names %s, whose content hashes to %s", blob, got)
		}
	}

	// Reproducible: a second build of the same inputs is the same file.
	first := fileSHA256(t, archive)
	if _, err := b.Image(ca); err != nil {
		t.Fatal(err)
	}
	if again := fileSHA256(t, archive); again != first {
		t.Fatalf("two builds of the same inputs differ: %s, %s", first, again)
	}
}

// A binary linked against the C library would not start in an image
// without one; the build refuses it and says how to build it.
func TestTheImageRefusesADynamicBinary(t *testing.T) {
	t.Parallel()
	b := newBuild(t)
	dynamic, err := exec.LookPath("ls") // linked against libc on every distribution
	if err != nil {
		t.Fatal(err)
	}
	b.Bin = t.TempDir()
	for _, name := range Binaries {
		body, err := os.ReadFile(dynamic)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(b.Bin, name), body, 0o755)
	}
	_, err = b.Image("")
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("want a refusal naming CGO_ENABLED=0, got %v", err)
	}
}

// The SBOM of each binary lists the modules it was linked from, at the
// versions go.mod chose, and the binary's own digest.
func TestTheSBOMListsTheModulesEachBinaryLinks(t *testing.T) {
	t.Parallel()
	b := newBuild(t)
	paths, err := b.SBOMs()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(b.Root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	required := func(mod string) string {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(mod) + ` (v\S+)`).FindSubmatch(gomod)
		if m == nil {
			t.Fatalf("go.mod does not require %s", mod)
		}
		return string(m[1])
	}
	want := map[string][]string{
		"cdc-agent": {"go.etcd.io/etcd/client/v3", "github.com/IBM/sarama", "gocloud.dev"},
		"cdcctl":    {"charm.land/bubbletea/v2", "github.com/spf13/cobra"},
	}
	for i, name := range Binaries {
		var doc spdxDocument
		body, err := os.ReadFile(paths[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || !strings.Contains(doc.DocumentNamespace, name) {
			t.Fatalf("%s: %s %s %s", paths[i], doc.SPDXVersion, doc.DataLicense, doc.DocumentNamespace)
		}
		pkgs := map[string]spdxPackage{}
		ids := map[string]bool{}
		for _, p := range doc.Packages {
			pkgs[p.Name] = p
			ids[p.SPDXID] = true
		}
		for _, r := range doc.Relationships {
			if !ids[r.RelatedSPDXElement] || (r.SPDXElementID != "SPDXRef-DOCUMENT" && !ids[r.SPDXElementID]) {
				t.Fatalf("relationship %+v names an unknown element", r)
			}
		}
		self := pkgs[name]
		if len(self.Checksums) != 1 || self.Checksums[0].ChecksumValue != fileSHA256(t, filepath.Join(b.Bin, name)) || self.VersionInfo != testVersion {
			t.Fatalf("%s's own entry: %+v", name, self)
		}
		if p := pkgs["stdlib"]; p.VersionInfo != runtime.Version() {
			t.Fatalf("stdlib %q, built with %s", p.VersionInfo, runtime.Version())
		}
		for _, mod := range want[name] {
			p, ok := pkgs[mod]
			if !ok || p.VersionInfo != required(mod) || p.ExternalRefs[0].ReferenceLocator != "pkg:golang/"+mod+"@"+required(mod) {
				t.Fatalf("%s's SBOM: %s %+v, go.mod has %s", name, mod, p, required(mod))
			}
		}
		if name == "cdc-agent" {
			if _, ok := pkgs["charm.land/bubbletea/v2"]; ok {
				t.Fatal("cdc-agent's SBOM lists the terminal UI's module, which only cdcctl links")
			}
		}
	}
}

// checksums.txt is what `sha256sum -c` checks.
func TestChecksumsAreWhatSha256sumChecks(t *testing.T) {
	t.Parallel()
	b := newBuild(t)
	paths, err := b.SBOMs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	if err := WriteChecksums(b.Out, names); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sha256sum", "-c", "checksums.txt")
	cmd.Dir = b.Out
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != len(names) {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	// A changed artifact fails the check.
	os.WriteFile(paths[0], []byte("{}"), 0o644)
	cmd = exec.Command("sha256sum", "-c", "checksums.txt")
	cmd.Dir = b.Out
	if err := cmd.Run(); err == nil {
		t.Fatal("sha256sum -c passed a changed file")
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	untarTo(t, f, dir)
}

// untarTo writes a tar's files under dir, with their modes, and returns
// its headers by name (without a trailing slash).
func untarTo(t *testing.T, r io.Reader, dir string) map[string]*tar.Header {
	t.Helper()
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[strings.TrimSuffix(h.Name, "/")] = h
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, os.FileMode(h.Mode)|0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
