//go:build !linux

package main

// hideEnvironment does nothing: only Linux has PR_SET_DUMPABLE.
func hideEnvironment() {}
