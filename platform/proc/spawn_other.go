//go:build !linux

package proc

import "os"

// outputPipe is os.Pipe.
func outputPipe() (r, w *os.File, err error) { return os.Pipe() }

// bootTicks answers -1: only Linux records start times.
func bootTicks() int64 { return -1 }

// record tells groups that the group of pid started.
func record(groups Recorder, pid int, _ int64) { groups.Started(pid) }
