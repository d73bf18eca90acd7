// Package figure is what the testnet's figures and the simulator's have in
// common: the size of a figure (Width × Height at DPI: 960 × 480 pixels),
// drawing one onto a canvas of that size and saving it as a PNG (SavePNG),
// and the gonum/plot pieces both build their charts from (Style, AddLine,
// Thumb, Palette). What each figure shows, its axes, titles and legends
// stay with its package (testnet/report's plot.go, testnet/sim's plot.go).
//
// It must not know about reports, samples or scenarios (it imports
// none of testnet, testnet/report and testnet/sim), hold state, or start goroutines; the
// only I/O is the file SavePNG writes.
package figure
