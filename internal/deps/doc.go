// Package deps holds the test that keeps every package's imports to the
// directions of DESIGN §3 (like Go's own go/build/deps_test.go): a table
// of what each package may import, and the known departures from it,
// each to be removed, never added to.
package deps
