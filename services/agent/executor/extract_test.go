package executor_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/agent/executor"
)

func TestExtractCode(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"fenced with prose", "Here:\n```go\npackage x\n```\nThanks", "package x\n"},
		{"first block wins", "```a\none\n```\n```b\ntwo\n```", "one\n"},
		{"tilde fence", "~~~python\nprint(1)\n~~~", "print(1)\n"},
		{"longer fence holds shorter", "````md\n```\ninner\n```\n````", "```\ninner\n```\n"},
		{"unclosed runs to the end", "```\nline 1\nline 2", "line 1\nline 2\n"},
		{"indented fence is dedented", "  ```\n  a\n    b\n  ```", "a\n  b\n"},
		{"CRLF", "```\r\na\r\nb\r\n```\r\n", "a\nb\n"},
		{"no fence: whole answer", "\n\n  indented first\nsecond  \n\n", "  indented first\nsecond\n"},
		{"inline backticks are not a fence", "use ```x``` here\nok", "use ```x``` here\nok\n"},
		{"four spaces is code, not a fence", "    ```\n    x\n    ```", "    ```\n    x\n    ```\n"},
		{"empty", "", ""},
		{"empty block", "```\n```", ""},
		{"closing fence with trailing spaces", "```\nx\n```   \nafter", "x\n"},
		{"closing fence must not have an info string", "```\nx\n```go\ny\n```", "x\n```go\ny\n"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, executor.ExtractCode(tc.in), tc.name)
	}
}

func FuzzExtractCode(f *testing.F) {
	for _, seed := range []string{
		"", "x", "```\n```", "```go\npackage x\n```\n", "text\n~~~\ncode\n~~~~\nmore", "  ```\n   a\n", "````\n```\n````",
		"\r\n```\r\nx\r\n```", "``` `x`\ny\n```", "\xff```\n\xfe\n```",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := executor.ExtractCode(in)
		if out != "" && !strings.HasSuffix(out, "\n") {
			t.Fatalf("result %q does not end with a newline", out)
		}
		if strings.TrimSpace(out) == "" && out != "" {
			t.Fatalf("blank result %q", out)
		}
		norm := strings.ReplaceAll(strings.ReplaceAll(in, "\r\n", "\n"), "\r", "\n")
		if len(out) > len(norm)+1 {
			t.Fatalf("result %q longer than the answer %q", out, in)
		}
		// Every line of the result is (the end of) a line of the answer.
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if !strings.Contains(norm, line) {
				t.Fatalf("line %q is not in the answer %q", line, in)
			}
		}
		if !strings.Contains(norm, "```") && !strings.Contains(norm, "~~~") {
			want := strings.TrimRight(strings.TrimLeft(norm, "\n"), " \t\n")
			// Leading lines holding only blanks go too.
			for {
				i := strings.IndexByte(want, '\n')
				if i < 0 || strings.TrimSpace(want[:i]) != "" {
					break
				}
				want = want[i+1:]
			}
			if strings.TrimSpace(want) == "" {
				want = ""
			} else {
				want += "\n"
			}
			if out != want {
				t.Fatalf("answer without a fence %q: got %q, want %q", in, out, want)
			}
		}
		// Wrapping fence-free text in a fence gives it back.
		if !strings.Contains(norm, "`") && !strings.Contains(norm, "~") && strings.TrimSpace(norm) != "" {
			wrapped := executor.ExtractCode("```\n" + norm + "\n```\n")
			if want := norm + "\n"; wrapped != want {
				t.Fatalf("wrapped %q: got %q, want %q", norm, wrapped, want)
			}
		}
	})
}
