//go:build !race

package comm

// raceEnabled: the race detector adds allocations of its own.
const raceEnabled = false
