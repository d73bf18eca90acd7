//go:build !race

package groupsim

const raceEnabled = false
