// Package version holds the build's version, set by the linker
// (-X github.com/cdcctl/cdcctl/internal/version.Version=...).
package version

// Version is "dev" for builds that did not go through the release pipeline.
var Version = "dev"

// Commit is the source revision of a release build.
var Commit = ""
