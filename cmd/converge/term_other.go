//go:build !unix

package main

import "os"

// fileWidth is the width in columns of the terminal f is, 0 when unknown.
func fileWidth(*os.File) int { return 0 }
