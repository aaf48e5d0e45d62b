// Package release builds what an operator installs, from the two binaries
// of one platform: the container image (an OCI archive that `docker load`
// and `podman load` read, built without a container engine), the deb and
// rpm packages (nfpm, from deploy/nfpm.yaml), an SPDX SBOM of each binary
// and the checksums of all of them.
//
// `make release` runs it for linux/amd64 and linux/arm64 into dist/
// (docs/deploy.md).
package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Binaries are the two programs every artifact carries.
var Binaries = []string{"cdc-agent", "cdcctl"}

// Build describes one platform's artifacts.
type Build struct {
	// Root is the repository's root: LICENSE, README.md and deploy/ are
	// read from it.
	Root string
	// Bin holds cdc-agent and cdcctl built for Arch (BuildBinaries).
	Bin string
	// Out is where the artifacts are written.
	Out string
	// Version is the release's version, "1.2.3" or "1.2.3-rc1"; a leading
	// v is dropped.
	Version string
	// Arch is the binaries' GOARCH; the OS is always linux.
	Arch string
	// Created stamps the image and the packages' files, so that the same
	// sources give the same bytes (SOURCE_DATE_EPOCH, or the commit's
	// time).
	Created time.Time
	// Stored leaves the packages and the image's layer uncompressed, with
	// the same contents: for tests, which read the contents, and whose
	// race-checked compressors take minutes over two binaries.
	Stored bool
}

func (b Build) version() string { return strings.TrimPrefix(b.Version, "v") }

// binary is the path of one of the binaries, checked to be a static
// linux executable of the build's architecture: the image has no libc and
// the packages promise to run on any distribution.
func (b Build) binary(name string) (string, error) {
	path := filepath.Join(b.Bin, name)
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w (build it with `make release` or release.BuildBinaries)", path, err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[b.Arch]
	if want == 0 {
		return "", fmt.Errorf("architecture %q: only amd64 and arm64 are released", b.Arch)
	}
	if f.Machine != want {
		return "", fmt.Errorf("%s is built for %s, not %s: build it with GOARCH=%s", path, f.Machine, b.Arch, b.Arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked; the image has no C library: build it with CGO_ENABLED=0", path)
		}
	}
	return path, nil
}

// BuildBinaries builds both binaries for linux/arch into dir, static and
// without local paths, with the version stamped in.
func BuildBinaries(ctx context.Context, root, dir, arch, version, commit string) error {
	ldflags := "-s -w -X github.com/cdcctl/cdcctl/internal/version.Version=" + version +
		" -X github.com/cdcctl/cdcctl/internal/version.Commit=" + commit
	for _, name := range Binaries {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags,
			"-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/%s for linux/%s: %v\n%s", name, arch, err, stderr.String())
		}
	}
	return nil
}

// WriteChecksums writes dir/checksums.txt in sha256sum's format over the
// named files of dir, so `sha256sum -c checksums.txt` checks a download.
func WriteChecksums(dir string, names []string) error {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	var out strings.Builder
	for _, name := range sorted {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&out, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(out.String()), 0o644)
}
