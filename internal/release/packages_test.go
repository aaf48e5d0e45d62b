package release

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// What both packages must install, and how.
var packaged = map[string]os.FileMode{
	"/usr/bin/cdc-agent":                               0o755,
	"/usr/bin/cdcctl":                                  0o755,
	"/usr/lib/systemd/system/cdc-agent.service":        0o644,
	"/etc/cdcctl/cdc-agent.yaml":                       0o640,
	"/usr/share/bash-completion/completions/cdcctl":    0o644,
	"/usr/share/zsh/vendor-completions/_cdcctl":        0o644,
	"/usr/share/fish/vendor_completions.d/cdcctl.fish": 0o644,
	"/usr/share/cdcctl/prometheus/alerts.yaml":         0o644,
	"/usr/share/cdcctl/grafana/cdcctl.json":            0o644,
	"/usr/share/doc/cdcctl/LICENSE":                    0o644,
}

// packages are built once for the tests that read them.
var packages struct {
	once  sync.Once
	build Build
	paths map[string]string
	err   error
}

func buildPackages(t *testing.T) (Build, map[string]string) {
	t.Helper()
	packages.once.Do(func() { packages.build, packages.paths, packages.err = makePackages(newBuild(t)) })
	if packages.err != nil {
		t.Fatal(packages.err)
	}
	return packages.build, packages.paths
}

func makePackages(b Build) (Build, map[string]string, error) {
	var err error
	if b.Out, err = os.MkdirTemp("", "cdcctl-packages-"); err != nil {
		return b, nil, err
	}
	// Completion scripts are written beside the binaries; keep the shared
	// build directory as it was.
	bin := filepath.Join(b.Out, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return b, nil, err
	}
	for _, name := range Binaries {
		body, err := os.ReadFile(filepath.Join(b.Bin, name))
		if err != nil {
			return b, nil, err
		}
		if err := os.WriteFile(filepath.Join(bin, name), body, 0o755); err != nil {
			return b, nil, err
		}
	}
	b.Bin = bin
	if err := b.Completions(filepath.Join(bin, "cdcctl")); err != nil {
		return b, nil, err
	}
	paths, err := b.Packages()
	if err != nil {
		return b, nil, err
	}
	byExt := map[string]string{}
	for _, p := range paths {
		byExt[filepath.Ext(p)] = p
	}
	return b, byExt, nil
}

// The deb, read by dpkg-deb: its control fields, every file at its path
// and mode, the config kept across upgrades (conffiles), and maintainer
// scripts that create the user and leave the service to the operator.
func TestTheDebInstallsTheAgentAsAService(t *testing.T) {
	t.Parallel()
	b, pkgs := buildPackages(t)
	deb := pkgs[".deb"]
	if deb == "" {
		t.Fatalf("no deb among %v", pkgs)
	}
	info := run(t, "dpkg-deb", "--field", deb, "Package", "Version", "Architecture", "License")
	for _, want := range []string{"Package: cdcctl", "Version: 1.2.3~rc.1", "Architecture: " + b.Arch} {
		if !strings.Contains(info, want) {
			t.Fatalf("dpkg-deb --field lacks %q:\n%s", want, info)
		}
	}
	// dpkg-deb --contents prints "-rwxr-xr-x root/root 123 date ./usr/bin/cdcctl".
	got := map[string]string{}
	for _, line := range strings.Split(run(t, "dpkg-deb", "--contents", deb), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 {
			got[strings.TrimPrefix(f[len(f)-1], ".")] = f[0] + " " + f[1]
		}
	}
	for path, mode := range packaged {
		if want := os.FileMode(mode).String(); !strings.HasPrefix(got[path], want+" ") {
			t.Errorf("%s in the deb: %q, want mode %s", path, got[path], want)
		}
	}
	if got["/etc/cdcctl/cdc-agent.yaml"] != "-rw-r----- root/cdc-agent" {
		t.Errorf("the config is %q; the agent's group must read it, no one else", got["/etc/cdcctl/cdc-agent.yaml"])
	}
	control := t.TempDir()
	run(t, "dpkg-deb", "--control", deb, control)
	conffiles, _ := os.ReadFile(filepath.Join(control, "conffiles"))
	if strings.TrimSpace(string(conffiles)) != "/etc/cdcctl/cdc-agent.yaml" {
		t.Errorf("conffiles: %q", conffiles)
	}
	checkScripts(t, map[string]string{
		"preinst":  readFile(t, filepath.Join(control, "preinst")),
		"postinst": readFile(t, filepath.Join(control, "postinst")),
		"prerm":    readFile(t, filepath.Join(control, "prerm")),
		"postrm":   readFile(t, filepath.Join(control, "postrm")),
	})
}

// The rpm, read by a header reader of this test (the rpm file format, not
// the writer's code): name, version, architecture, every file with its
// mode and owner, the config marked noreplace, and the scripts.
func TestTheRpmInstallsTheAgentAsAService(t *testing.T) {
	t.Parallel()
	_, pkgs := buildPackages(t)
	path := pkgs[".rpm"]
	if path == "" {
		t.Fatalf("no rpm among %v", pkgs)
	}
	h := readRPMHeader(t, path)
	if h.str(1000) != "cdcctl" || h.str(1001) != "1.2.3~rc.1" || h.str(1014) != "Apache-2.0" {
		t.Fatalf("rpm name %q version %q license %q", h.str(1000), h.str(1001), h.str(1014))
	}
	names, dirs, dirIdx := h.strs(1117), h.strs(1118), h.ints(1116)
	modes, flags, groups := h.ints(1030), h.ints(1037), h.strs(1040)
	files := map[string]int{}
	for i, base := range names {
		files[dirs[dirIdx[i]]+base] = i
	}
	for p, mode := range packaged {
		i, ok := files[p]
		if !ok {
			t.Errorf("the rpm lacks %s", p)
			continue
		}
		if got := os.FileMode(modes[i] & 0o777); got != mode {
			t.Errorf("%s in the rpm: mode %s, want %s", p, got, mode)
		}
	}
	const config, noreplace = 1, 16
	if i := files["/etc/cdcctl/cdc-agent.yaml"]; flags[i]&(config|noreplace) != config|noreplace || groups[i] != "cdc-agent" {
		t.Errorf("the config's flags %d group %q: want config|noreplace and group cdc-agent", flags[i], groups[i])
	}
	checkScripts(t, map[string]string{"preinst": h.str(1023), "postinst": h.str(1024), "prerm": h.str(1025), "postrm": h.str(1026)})
}

// checkScripts: the scripts parse as sh, the user is created before the
// files land, the service is not started by the install, and it is
// stopped only on removal.
func checkScripts(t *testing.T, scripts map[string]string) {
	t.Helper()
	for name, body := range scripts {
		if body == "" {
			t.Errorf("no %s script", name)
			continue
		}
		f := filepath.Join(t.TempDir(), name)
		os.WriteFile(f, []byte(body), 0o755)
		if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("%s is not valid sh: %v\n%s", name, err, out)
		}
	}
	if !strings.Contains(scripts["preinst"], "useradd --system") {
		t.Error("the pre-install script creates no system user")
	}
	if code := withoutComments(scripts["postinst"]); strings.Contains(code, "enable") || strings.Contains(code, "systemctl start") {
		t.Error("the install starts the agent before its config is edited")
	}
	if !strings.Contains(scripts["prerm"], "remove | 0)") {
		t.Error("the pre-remove script does not tell removal from upgrade")
	}
}

func withoutComments(script string) string {
	var out []string
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rpmHeader is the main header of an rpm file: tag → entry.
type rpmHeader struct {
	entries map[int32]rpmEntry
	data    []byte
}

type rpmEntry struct{ typ, offset, count int32 }

// readRPMHeader skips the 96-byte lead and the signature header (padded to
// 8 bytes) and reads the main header's index and data.
func readRPMHeader(t *testing.T, path string) rpmHeader {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 96 || string(b[:4]) != "\xed\xab\xee\xdb" {
		t.Fatalf("%s is not an rpm (lead)", path)
	}
	header := func(off int) (rpmHeader, int) {
		if off+16 > len(b) || string(b[off:off+3]) != "\x8e\xad\xe8" {
			t.Fatalf("no rpm header at %d", off)
		}
		n := int(binary.BigEndian.Uint32(b[off+8:]))
		size := int(binary.BigEndian.Uint32(b[off+12:]))
		idx := off + 16
		data := idx + 16*n
		if data+size > len(b) {
			t.Fatalf("rpm header at %d overruns the file", off)
		}
		h := rpmHeader{entries: map[int32]rpmEntry{}, data: b[data : data+size]}
		for i := 0; i < n; i++ {
			e := b[idx+16*i:]
			h.entries[int32(binary.BigEndian.Uint32(e))] = rpmEntry{
				typ: int32(binary.BigEndian.Uint32(e[4:])), offset: int32(binary.BigEndian.Uint32(e[8:])), count: int32(binary.BigEndian.Uint32(e[12:])),
			}
		}
		return h, data + size
	}
	_, end := header(96)
	if end%8 != 0 {
		end += 8 - end%8
	}
	h, _ := header(end)
	return h
}

func (h rpmHeader) strs(tag int32) []string {
	e, ok := h.entries[tag]
	if !ok {
		return nil
	}
	var out []string
	rest := h.data[e.offset:]
	for i := int32(0); i < e.count; i++ {
		n := strings.IndexByte(string(rest), 0)
		out = append(out, string(rest[:n]))
		rest = rest[n+1:]
	}
	return out
}

func (h rpmHeader) str(tag int32) string {
	if s := h.strs(tag); len(s) > 0 {
		return s[0]
	}
	return ""
}

// ints reads an INT16 (type 3) or INT32 (type 4) array.
func (h rpmHeader) ints(tag int32) []int {
	e, ok := h.entries[tag]
	if !ok {
		return nil
	}
	var out []int
	for i := int32(0); i < e.count; i++ {
		switch e.typ {
		case 3:
			out = append(out, int(binary.BigEndian.Uint16(h.data[e.offset+2*i:])))
		case 4:
			out = append(out, int(binary.BigEndian.Uint32(h.data[e.offset+4*i:])))
		default:
			panic(fmt.Sprintf("rpm tag %d has type %d", tag, e.typ))
		}
	}
	return out
}
