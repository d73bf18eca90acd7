// Package planner is the capacity planner behind `overlayd testnet sim
// plan`: how many mega-supernodes of what capacity (or how much supernode
// headroom) a network needs so that, after losing a share of its
// supernodes at once, a target fraction of its clients is attached again
// within a target time. Search answers over the simulator's result: every
// candidate is simulated (testnet/sim, the skype2010 scenario on the
// operator's network, policy overlayd) with each seed, and the worst seed
// counts. Plan.Text is the answer for an operator; Input.Memory and
// Input.Workers size how many simulations fit in memory at once.
//
// It uses only the simulator's exported surface (sim.Config, sim.Params,
// sim.FindPolicy, sim.TimeToFraction) and must not reach into its
// engine: a figure the planner needs of a run is added to testnet/sim as
// a function of a Config, as TimeToFraction is. It must not read the wall
// clock or draw random numbers of its own: the plan is a function of the
// Input (its seeds included), and Input.Parallel changes how fast it comes,
// never what it says. The goroutines of a parallel Search are started and
// waited for within the call.
package planner
