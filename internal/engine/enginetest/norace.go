//go:build !race

package enginetest

// Race: see race.go.
const Race = false
