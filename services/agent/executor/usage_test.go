package executor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The agent-cli executor's usage is the last "converge-usage:" line of the CLI's output; bad
// values are ignored, unknown keys skipped.
func TestParseUsage(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		out  string
		want Usage
	}{
		"none":     {out: "did the work\n", want: Usage{}},
		"full":     {out: "work\nconverge-usage: input_tokens=1200 output_tokens=340 cost_usd=0.0123\n", want: Usage{InputTokens: 1200, OutputTokens: 340, CostUSDMicros: 12300}},
		"last":     {out: "converge-usage: input_tokens=1\nmore\n  converge-usage: output_tokens=7 model=x\n", want: Usage{OutputTokens: 7}},
		"bad":      {out: "converge-usage: input_tokens=-5 output_tokens=abc cost_usd=-1 input_tokens=9\n", want: Usage{InputTokens: 9}},
		"too big":  {out: "converge-usage: input_tokens=99999999999999999 cost_usd=1e12\n", want: Usage{}},
		"mid-line": {out: "echo converge-usage: input_tokens=5\n", want: Usage{}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, ParseUsage(tc.out))
		})
	}
}
