module github.com/overlayd/overlayd/bench

go 1.26.8

require (
	github.com/buraksezer/consistent v0.10.0
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/golang/groupcache v0.0.0-20241129210726-2c02b8208cf8
	github.com/overlayd/overlayd v0.0.0
	github.com/serialx/hashring v0.0.0-20200727003509-22c0c7ab6b1b
	stathat.com/c/consistent v1.0.0
)

require github.com/stretchr/testify v1.12.1 // indirect

replace github.com/overlayd/overlayd => ../

// stathat/consistent lives at github.com/stathat/consistent but names itself
// (import comment, its own tests) stathat.com/c/consistent, a path the
// module proxy does not serve: import it by that name and resolve that
// name to the github.com module.
replace stathat.com/c/consistent v1.0.0 => github.com/stathat/consistent v1.0.0
