package executor

import (
	"math"
	"strconv"
	"strings"
)

// Usage is the model usage of one executor run.
type Usage struct {
	// InputTokens and OutputTokens are the prompt and completion tokens.
	InputTokens, OutputTokens int64
	// CostUSDMicros is the cost in millionths of a US dollar; 0 when not reported.
	CostUSDMicros int64
}

// Add is u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		CostUSDMicros: u.CostUSDMicros + v.CostUSDMicros}
}

// Zero reports whether nothing was reported.
func (u Usage) Zero() bool { return u == Usage{} }

// UsagePrefix starts the line an agent CLI prints to report its model usage (docs/tasks.md):
//
//	converge-usage: input_tokens=1200 output_tokens=340 cost_usd=0.0123
//
// Fields are space-separated key=value pairs, each optional, in any order; unknown keys are
// ignored. The last such line of the output counts (a CLI prints it once, at the end; the agent
// keeps only the tail of the output).
const UsagePrefix = "converge-usage:"

// maxUsageTokens bounds a reported figure (a garbled line must not overflow the sums).
const maxUsageTokens = 1 << 40

// ParseUsage reads the last "converge-usage:" line of out; zero when there is none. A malformed
// or negative value is ignored (the other fields still count).
func ParseUsage(out string) Usage {
	var u Usage
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		rest, ok := strings.CutPrefix(line, UsagePrefix)
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "input_tokens":
				u.InputTokens = tokens(v)
			case "output_tokens":
				u.OutputTokens = tokens(v)
			case "cost_usd":
				if c, err := strconv.ParseFloat(v, 64); err == nil && c >= 0 && c < 1e9 {
					u.CostUSDMicros = int64(math.Round(c * 1e6))
				}
			}
		}
		return u
	}
	return u
}

// tokens parses a token count; 0 when malformed, negative or absurd.
func tokens(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxUsageTokens {
		return 0
	}
	return n
}
