// Package version says what build of overlayd is running: the module
// version, the VCS commit and time, and the Go toolchain, read from the
// build info the Go linker embeds (Build), and the pure reading of a
// given build info that tests use (Read). The host announces
// Info.UserAgent through identify; the status and the CLI show it.
//
// It holds no state and must not import the rest of the module: the
// testnet's reports name the build with it without the daemon.
package version
