// Package report is what a testnet scenario run leaves behind: the Report
// value (the run's configuration, criteria, figures, events and samples),
// written by Write as report.json (its layout pinned by a golden file and
// Schema), three PNG plots (WritePlots: attached clients, each
// supernode's load against its capacity, deliveries and refusals per
// second, every event marked), saved through testnet/figure, and
// report.md (WriteMarkdown), the human summary linking them.
//
// Everything it draws or writes comes from a Report alone. It must not
// start, measure or drive a network (it does not import testnet or node;
// it imports only node/version, to name the build), read a
// clock, hold state or start goroutines; its only I/O is the files in the
// directory it is given.
package report
