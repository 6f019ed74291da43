package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/auth"
)

func TestAuthHashToken(t *testing.T) {
	t.Parallel()
	root := rootCommand()
	var out bytes.Buffer
	root.SetArgs([]string{"auth", "hash-token"})
	root.SetIn(strings.NewReader("test\n"))
	root.SetOut(&out)
	require.NoError(t, root.Execute())
	require.Equal(t, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n", out.String())

	root = rootCommand()
	out.Reset()
	root.SetArgs([]string{"auth", "new-token"})
	root.SetOut(&out)
	require.NoError(t, root.Execute())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, auth.HashToken(lines[0]), lines[1])
}
