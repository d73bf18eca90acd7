// Package bench compares overlayd's packages with peer libraries. It is a
// separate module so that the peers never become dependencies of overlayd;
// it has no code outside its _test files. See README.md for how to run it.
package bench
