//go:build !linux

package devcluster

import "errors"

// errLinuxOnly: CheckRealNodeHost refuses a real node before these run.
var errLinuxOnly = errors.New("the real node runs on Linux only")

func findLeftovers(string) (hostLeftovers, error) { return hostLeftovers{}, nil }

func removeLeftovers(hostLeftovers) error { return nil }

func addServiceAddress() error { return errLinuxOnly }
