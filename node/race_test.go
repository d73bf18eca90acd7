//go:build race

package node

// raceEnabled scales down tests that start hundreds of hosts: the race
// detector makes each several times slower on this 2-core class of machine.
const raceEnabled = true
