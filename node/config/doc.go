// Package config is the operator-facing configuration of an overlayd
// node: the Config type (flags, environment and config file all land in
// it), its embedded defaults (Default), its validation (Validate, whose
// *Error names the bad flag), the YAML config file (LoadFile), the
// logger it asks for (NewLogger), and the values derived from it that
// the node's parts are given (RolePolicy, RelaySettings, ConnBudget,
// PartialView, BootstrapPeers, OperatorKeys).
//
// It holds values and pure functions only: it must not start anything,
// build a host, read the data dir or import package node, so that the
// CLI, the testnet and the simulator can read the defaults without the
// daemon.
package config
