//go:build race

package agent

// raceEnabled: the race detector slows the engine several times over, so
// the scale tests run smaller under it.
const raceEnabled = true
