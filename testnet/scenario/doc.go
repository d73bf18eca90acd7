// Package scenario runs the named scenarios of `overlayd testnet run` on
// an in-process testnet: All lists them (tour, steady, churn, outage,
// storm, recovery, partition), Run starts a testnet.Network, plays one
// (kills, restarts, churn, a reconnect storm, promotions and hand-backs, a
// partition and its heal), samples the network every SampleEvery, checks
// the scenario's pass criteria and returns the run as a report.Report.
//
// It drives the network only through testnet's exported controls, and it
// must not build or tune nodes itself (that is testnet's) nor write,
// draw or format the report (that is testnet/report's). A run's
// goroutines (the sampler) end before Run returns.
package scenario
