package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SBOMFile is the name of one binary's SBOM.
func (b Build) SBOMFile(binary string) string {
	return fmt.Sprintf("%s_%s_linux_%s.spdx.json", binary, b.version(), b.Arch)
}

// SBOMs writes an SPDX 2.3 document for each binary, listing the Go
// modules it was linked from as the linker recorded them (the module
// list `go version -m` prints), with the Go toolchain as "stdlib".
// Reading the binary rather than go.mod lists what shipped: modules a
// binary does not link are left out, replaced modules appear as their
// replacements.
func (b Build) SBOMs() ([]string, error) {
	var out []string
	for _, name := range Binaries {
		path, err := b.binary(name)
		if err != nil {
			return nil, err
		}
		doc, err := b.sbom(name, path)
		if err != nil {
			return nil, err
		}
		body, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return nil, err
		}
		file := filepath.Join(b.Out, b.SBOMFile(name))
		if err := os.WriteFile(file, append(body, '\n'), 0o644); err != nil {
			return nil, err
		}
		out = append(out, file)
	}
	return out, nil
}

// The parts of SPDX 2.3 (JSON) an SBOM of Go modules uses.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreationInfo   `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		Name                  string            `json:"name"`
		SPDXID                string            `json:"SPDXID"`
		VersionInfo           string            `json:"versionInfo"`
		DownloadLocation      string            `json:"downloadLocation"`
		FilesAnalyzed         bool              `json:"filesAnalyzed"`
		LicenseConcluded      string            `json:"licenseConcluded"`
		LicenseDeclared       string            `json:"licenseDeclared"`
		CopyrightText         string            `json:"copyrightText"`
		PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
		Checksums             []spdxChecksum    `json:"checksums,omitempty"`
		ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	}
	spdxChecksum struct {
		Algorithm     string `json:"algorithm"`
		ChecksumValue string `json:"checksumValue"`
	}
	spdxExternalRef struct {
		ReferenceCategory string `json:"referenceCategory"`
		ReferenceType     string `json:"referenceType"`
		ReferenceLocator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		SPDXElementID      string `json:"spdxElementId"`
		RelationshipType   string `json:"relationshipType"`
		RelatedSPDXElement string `json:"relatedSpdxElement"`
	}
)

func (b Build) sbom(name, path string) (*spdxDocument, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s has no Go build information: %w", path, err)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	docName := fmt.Sprintf("%s-%s-linux-%s", name, b.version(), b.Arch)
	doc := &spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        docName,
		// Unique per binary: its digest is in the name.
		DocumentNamespace: "https://github.com/cdcctl/cdcctl/spdx/" + docName + "-" + digest,
		CreationInfo: spdxCreationInfo{
			Created:  b.Created.UTC().Format("2006-01-02T15:04:05Z"),
			Creators: []string{"Tool: cdcctl-release", "Organization: The cdcctl Authors"},
		},
	}
	rootID := "SPDXRef-Package-" + name
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: name, SPDXID: rootID, VersionInfo: b.version(),
		DownloadLocation: "https://github.com/cdcctl/cdcctl", LicenseConcluded: "Apache-2.0",
		LicenseDeclared: "Apache-2.0", CopyrightText: "Copyright 2026 The cdcctl Authors",
		PrimaryPackagePurpose: "APPLICATION",
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: digest}},
		ExternalRefs:          []spdxExternalRef{purl(info.Main.Path, b.Version)},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", rootID})
	dep := func(id, modPath, version string) {
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: modPath, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION",
			// The modules' licenses are not read here; NOASSERTION is
			// SPDX's word for that, not a claim.
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			PrimaryPackagePurpose: "LIBRARY",
			ExternalRefs:          []spdxExternalRef{purl(modPath, version)},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{rootID, "DEPENDS_ON", id})
	}
	dep("SPDXRef-Package-stdlib", "stdlib", info.GoVersion)
	for i, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		dep(fmt.Sprintf("SPDXRef-Package-module-%d", i+1), m.Path, m.Version)
	}
	return doc, nil
}

// purl is a Go module's package URL (pkg:golang/<module path>@<version>).
func purl(modPath, version string) spdxExternalRef {
	loc := "pkg:golang/" + modPath
	if version != "" && version != "(devel)" {
		loc += "@" + strings.TrimSpace(version)
	}
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: loc}
}
