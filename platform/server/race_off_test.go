//go:build !race

package server_test

// raceAllocs: see race_on_test.go.
const raceAllocs = 0
