// Command mkrelease builds the release artifacts into a directory: for
// each architecture the two static binaries, the container image archive,
// the deb and rpm packages and an SBOM of each binary; then checksums.txt
// over all of them. `make release` runs it; docs/deploy.md says how to
// load, install and check what it writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/release"
)

func main() {
	out := flag.String("out", "dist", "directory to write the artifacts into (emptied first)")
	arches := flag.String("arch", "amd64,arm64", "architectures to build, comma-separated (amd64, arm64)")
	version := flag.String("version", "", "release version, 1.2.3 (default: the git tag, or 0.0.0-dev+<commit>)")
	caCerts := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle (PEM) to put in the image for the sinks' HTTPS; empty: none")
	flag.Parse()
	if err := run(*out, strings.Split(*arches, ","), *version, *caCerts); err != nil {
		fmt.Fprintln(os.Stderr, "mkrelease:", err)
		os.Exit(1)
	}
}

func run(out string, arches []string, version, caCerts string) error {
	ctx := context.Background()
	commit := git("rev-parse", "HEAD")
	if version == "" {
		version = defaultVersion(commit)
	}
	created := commitTime()
	if caCerts != "" {
		if _, err := os.Stat(caCerts); err != nil {
			return fmt.Errorf("the image's CA bundle: %w (give -ca-certs=PATH, or -ca-certs= for none)", err)
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	var artifacts []string
	hostCdcctl := ""
	for _, arch := range arches {
		bin := filepath.Join(out, "linux_"+arch)
		step("go build linux/" + arch)
		if err := release.BuildBinaries(ctx, ".", bin, arch, version, commit); err != nil {
			return err
		}
		if arch == runtime.GOARCH {
			hostCdcctl = filepath.Join(bin, "cdcctl")
		}
	}
	if hostCdcctl == "" {
		// The completion scripts come from running cdcctl.
		tmp := filepath.Join(out, ".host")
		if err := release.BuildBinaries(ctx, ".", tmp, runtime.GOARCH, version, commit); err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		hostCdcctl = filepath.Join(tmp, "cdcctl")
	}
	for _, arch := range arches {
		b := release.Build{Root: ".", Bin: filepath.Join(out, "linux_"+arch), Out: out, Version: version, Arch: arch, Created: created}
		step("image linux/" + arch)
		img, err := b.Image(caCerts)
		if err != nil {
			return err
		}
		step("completion scripts, deb and rpm linux/" + arch)
		if err := b.Completions(hostCdcctl); err != nil {
			return err
		}
		pkgs, err := b.Packages()
		if err != nil {
			return err
		}
		step("SBOMs linux/" + arch)
		sboms, err := b.SBOMs()
		if err != nil {
			return err
		}
		for _, p := range append(append([]string{img}, pkgs...), sboms...) {
			artifacts = append(artifacts, filepath.Base(p))
		}
		for _, name := range release.Binaries {
			artifacts = append(artifacts, filepath.Join("linux_"+arch, name))
		}
	}
	if err := release.WriteChecksums(out, artifacts); err != nil {
		return err
	}
	fmt.Printf("wrote %d artifacts and checksums.txt into %s (version %s)\n", len(artifacts), out, version)
	return nil
}

func step(s string) { fmt.Fprintln(os.Stderr, "mkrelease:", s) }

func git(args ...string) string {
	b, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// defaultVersion is the tag on HEAD, or a development version naming the
// commit.
func defaultVersion(commit string) string {
	if tag := git("describe", "--tags", "--exact-match"); tag != "" {
		return strings.TrimPrefix(tag, "v")
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		return "0.0.0-dev"
	}
	return "0.0.0-dev+" + commit
}

// commitTime stamps the artifacts: SOURCE_DATE_EPOCH if set, else the
// commit's time, so a rebuild of the same commit gives the same bytes.
func commitTime() time.Time {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = git("log", "-1", "--format=%ct")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC()
	}
	return time.Unix(0, 0).UTC()
}
