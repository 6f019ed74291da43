package servicecmd

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// SecretFlags are the flags whose values are secrets, with their variables: each can also be read
// from a file named by <variable>_FILE (CONVERGE_POSTGRES_URL_FILE=/run/secrets/pg), which keeps
// the secret out of the process's environment (/proc/<pid>/environ, a child that inherits it,
// `docker inspect`). A flag given on the command line wins; a variable and its _FILE together are
// an error.
var SecretFlags = map[string]string{
	"postgres-url": "CONVERGE_POSTGRES_URL",
	"redis-url":    "CONVERGE_REDIS_URL",
	"auth-token":   "CONVERGE_AUTH_TOKENS",
}

// SecretFromFile answers the secret the file named by $<name>_FILE holds (surrounding white space
// trimmed); ok is false when <name>_FILE is not set. Both <name> and <name>_FILE set is an error:
// which one wins would be a guess.
func SecretFromFile(name string) (value string, ok bool, err error) {
	path, set := os.LookupEnv(name + "_FILE")
	if !set || path == "" {
		return "", false, nil
	}
	if _, both := os.LookupEnv(name); both {
		return "", false, fmt.Errorf("%s and %s_FILE are both set: keep one (the file keeps the secret out of the environment)", name, name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("%s_FILE: %w", name, err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// SecretsFromFiles sets cmd's secret flags (SecretFlags) that the command line does not give from
// their _FILE variables. Call it first thing in RunE, flags parsed. A list flag (--auth-token)
// takes one value per line or comma.
func SecretsFromFiles(cmd *cobra.Command) error {
	for flag, env := range SecretFlags {
		f := cmd.Flags().Lookup(flag)
		if f == nil || f.Changed {
			continue
		}
		v, ok, err := SecretFromFile(env)
		if err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		if f.Value.Type() != "stringSlice" {
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("%s_FILE: %w", env, err)
			}
			continue
		}
		type replacer interface{ Replace([]string) error }
		var items []string
		for _, line := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == ',' }) {
			if line = strings.TrimSpace(line); line != "" {
				items = append(items, line)
			}
		}
		if err := f.Value.(replacer).Replace(items); err != nil {
			return fmt.Errorf("%s_FILE: %w", env, err)
		}
	}
	return nil
}
