package main

// The peers: ninja and make given the same graph, and ninja's own log of when each step ran.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// peer runs ninja or make on the graph `rounds` times in fresh directories and reports the median
// wall time. For ninja it also reports, from every round's `.ninja_log`, the same latency as
// converge's (dependency done → dependent start; claim → start has no counterpart in ninja, so the
// fan-out reports none), pooled over the rounds: the log is what ninja keeps of when each step
// started and ended, in milliseconds from its start, the resolution of converge's embedded log.
func peer(tool string, g graph, jobs, rounds int) (side, error) {
	file, body := peerFile(tool, g)
	if _, err := exec.LookPath(tool); err != nil {
		return side{}, fmt.Errorf("%s not found on PATH (Debian: apt-get install ninja-build make)", tool)
	}
	var walls, lat []time.Duration
	for range max(rounds, 1) {
		dir, err := os.MkdirTemp("", "converge-dag-"+tool+"-")
		if err != nil {
			return side{}, err
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			return side{}, err
		}
		args := []string{"-j", fmt.Sprint(jobs)}
		if tool == "ninja" {
			args = append(args, "--quiet")
		} else {
			args = append(args, "--silent")
		}
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		start := time.Now()
		out, err := cmd.CombinedOutput()
		walls = append(walls, time.Since(start))
		if err == nil && tool == "ninja" && g.edges() > 0 {
			var l []time.Duration
			l, err = ninjaLatencies(filepath.Join(dir, ".ninja_log"), g)
			lat = append(lat, l...)
		}
		_ = os.RemoveAll(dir)
		if err != nil {
			return side{}, fmt.Errorf("%v\n%s", err, out)
		}
	}
	r := side{Outcome: "ok", WallS: pct(walls, 50).Seconds(), PeerRounds: len(walls)}
	if len(lat) > 0 {
		r.Latency = "dependency done→dependent start (.ninja_log)"
		r.LatP50Ms, r.LatP99Ms, r.LatMaxMs = msf(pct(lat, 50)), msf(pct(lat, 99)), msf(pct(lat, 100))
	}
	return r, nil
}

// peerFile is the build file of tool for the graph: its name and its text. Every step runs `true`.
func peerFile(tool string, g graph) (file, body string) {
	var b strings.Builder
	switch tool {
	case "ninja":
		file = "build.ninja"
		b.WriteString("rule t\n  command = true\n\n")
		for i, ds := range g.deps {
			fmt.Fprintf(&b, "build %s: t", taskID(i))
			for _, d := range ds {
				fmt.Fprintf(&b, " %s", taskID(d))
			}
			b.WriteString("\n")
		}
		b.WriteString("build all: phony")
		for i := range g.deps {
			fmt.Fprintf(&b, " %s", taskID(i))
		}
		b.WriteString("\ndefault all\n")
	case "make":
		file = "Makefile"
		b.WriteString("all:")
		for i := range g.deps {
			fmt.Fprintf(&b, " %s", taskID(i))
		}
		b.WriteString("\n.PHONY: all")
		for i := range g.deps {
			fmt.Fprintf(&b, " %s", taskID(i))
		}
		b.WriteString("\n")
		for i, ds := range g.deps {
			fmt.Fprintf(&b, "%s:", taskID(i))
			for _, d := range ds {
				fmt.Fprintf(&b, " %s", taskID(d))
			}
			b.WriteString("\n\ttrue\n")
		}
	}
	return file, b.String()
}

// ninjaLatencies reads a `.ninja_log` (format v5 or v6: "start end mtime output hash", tab
// separated, milliseconds from the build's start) of one build of g and answers, for every step
// with dependencies, its start minus the latest end among them. Every step of g must be in the
// log exactly once: a build that ran a step twice, or not at all, is not one build of g.
func ninjaLatencies(path string, g graph) ([]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	index := make(map[string]int, len(g.deps))
	for i := range g.deps {
		index[taskID(i)] = i
	}
	type span struct{ start, end int64 }
	spans := make([]span, len(g.deps))
	seen := make([]bool, len(g.deps))
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			if !strings.HasPrefix(text, "# ninja log v5") && !strings.HasPrefix(text, "# ninja log v6") {
				return nil, fmt.Errorf("%s: not a ninja log of version 5 or 6: %q", path, text)
			}
			continue
		}
		fields := strings.Split(text, "\t")
		if len(fields) < 5 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 5", path, line, len(fields))
		}
		i, ok := index[fields[3]]
		if !ok {
			return nil, fmt.Errorf("%s:%d: step %q is not in the graph", path, line, fields[3])
		}
		if seen[i] {
			return nil, fmt.Errorf("%s:%d: step %q logged twice", path, line, fields[3])
		}
		start, err1 := strconv.ParseInt(fields[0], 10, 64)
		end, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil || end < start {
			return nil, fmt.Errorf("%s:%d: bad start/end %q %q", path, line, fields[0], fields[1])
		}
		spans[i], seen[i] = span{start, end}, true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []time.Duration
	for i, ds := range g.deps {
		if !seen[i] {
			return nil, fmt.Errorf("%s: step %s not logged", path, taskID(i))
		}
		if len(ds) == 0 {
			continue
		}
		ready := int64(0)
		for _, d := range ds {
			ready = max(ready, spans[d].end)
		}
		out = append(out, time.Duration(spans[i].start-ready)*time.Millisecond)
	}
	return out, nil
}
