package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/converge-dev/converge/platform/clustertest"
)

// userHZ is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on every Linux architecture Go
// supports).
const userHZ = 100

// cpuSample is a process's CPU time so far: its own (utime + stime) and its exited, waited-for
// children's (cutime + cstime).
type cpuSample struct {
	name                string
	self, sys, children time.Duration
}

// processesCPU reads each process's /proc/<pid>/stat; a process that cannot be read counts 0.
func processesCPU(procs []*clustertest.Process) []cpuSample {
	out := make([]cpuSample, 0, len(procs))
	for _, p := range procs {
		s := cpuSample{name: p.Name}
		s.self, s.sys, s.children, _ = statCPU(p.Pid())
		out = append(out, s)
	}
	return out
}

// statCPU reads utime+stime, stime and cutime+cstime of process pid.
func statCPU(pid int) (self, sys, children time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime, stime, cutime, cstime are fields 14–17.
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks [4]int64
	for k := range ticks {
		if ticks[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	tick := time.Second / userHZ
	return time.Duration(ticks[0]+ticks[1]) * tick, time.Duration(ticks[1]) * tick, time.Duration(ticks[2]+ticks[3]) * tick, nil
}

// cpuPerTask answers each process's CPU between two samples, in ms per task.
func cpuPerTask(before, after []cpuSample, tasks int) []processCPU {
	if tasks <= 0 {
		return nil
	}
	out := make([]processCPU, 0, len(after))
	for i, a := range after {
		b := before[i]
		out = append(out, processCPU{Name: a.name,
			SelfMs:     float64((a.self - b.self).Microseconds()) / 1000 / float64(tasks),
			ChildrenMs: float64((a.children - b.children).Microseconds()) / 1000 / float64(tasks),
			SelfSysMs:  float64((a.sys - b.sys).Microseconds()) / 1000 / float64(tasks)})
	}
	return out
}

// cpuLine words the processes' CPU per task, with the sum.
func cpuLine(ps []processCPU) string {
	var parts []string
	var sum float64
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %.3f (sys %.3f) + children %.3f", p.Name, p.SelfMs, p.SelfSysMs, p.ChildrenMs))
		sum += p.SelfMs + p.ChildrenMs
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; sum %.3f", sum)
}

// handledRPCs reads grpc_server_handled_total from a /metrics address, summed over codes, by
// "Service/Method" (the service's last name element); nil when it cannot be read.
func handledRPCs(addr string) map[string]float64 {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	return parseHandled(string(body))
}

// parseHandled reads grpc_server_handled_total from Prometheus text.
func parseHandled(body string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "grpc_server_handled_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "grpc_server_handled_total{"), "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || v == 0 {
			continue
		}
		svc, method := label(labels, "grpc_service"), label(labels, "grpc_method")
		svc = svc[strings.LastIndexByte(svc, '.')+1:]
		out[svc+"/"+method] += v
	}
	return out
}

// label answers the value of name="…" in a Prometheus label list.
func label(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// rpcsPerTask answers the RPCs served between two scrapes per task, by method (those above 0).
func rpcsPerTask(before, after map[string]float64, tasks int) map[string]float64 {
	if after == nil || tasks <= 0 {
		return nil
	}
	out := map[string]float64{}
	for m, v := range after {
		if d := v - before[m]; d > 0 {
			out[m] = math.Round(d/float64(tasks)*1000) / 1000
		}
	}
	return out
}

// rpcLine words the RPCs per task, most first, with the total.
func rpcLine(rpcs map[string]float64) string {
	var names []string
	var total float64
	for m, v := range rpcs {
		names = append(names, m)
		total += v
	}
	slices.SortFunc(names, func(a, b string) int {
		if rpcs[a] != rpcs[b] {
			if rpcs[a] > rpcs[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, m := range names {
		parts = append(parts, fmt.Sprintf("%s %.3f", m, rpcs[m]))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; total %.3f", total)
}
