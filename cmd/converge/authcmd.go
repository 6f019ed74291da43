package main

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/platform/auth"
)

// authCommand is `converge auth`: the helpers of auth files (--auth-file, docs/security.md).
func authCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make tokens and their hashes for auth files (--auth-file)",
		Args:  noArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "hash-token",
		Short: "Print the sha256 of a token read from stdin (one line): what an auth file's token_sha256 holds",
		Long: "converge auth hash-token reads a bearer token from its standard input (the first line, " +
			"so that it never shows in a process list or shell history) and prints its hex SHA-256, " +
			"the form an auth file stores tokens in:\n\n" +
			"  printf %s \"$TOKEN\" | converge auth hash-token",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			token := strings.TrimRight(line, "\r\n")
			if token == "" {
				if err != nil {
					return usagef("no token on stdin: %v", err)
				}
				return usagef("the first line of stdin is empty")
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), auth.HashToken(token))
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "new-token",
		Short: "Print a new random token and, on the second line, its sha256 for the auth file",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok := auth.NewToken()
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", tok, auth.HashToken(tok))
			return err
		},
	})
	return cmd
}
