//go:build race

package enginetest

// Race: the race detector slows the engine several times over, so the
// scale tests run smaller under it.
const Race = true
