package proc

import (
	"os"
	"sort"
)

// BaseEnvNames are the variables of the caller's environment every process gets (when set):
// enough for programs to find each other, a home, a locale and a temporary directory, and
// nothing that could carry a secret.
var BaseEnvNames = []string{"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"}

// DefaultPath is the PATH of a process when the caller has none.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// Env builds a minimal environment from the caller's (os.LookupEnv): BaseEnvNames, then extra,
// then the passthrough names that are set (a passthrough name that is not set is left out).
// Later sources win. The entries are sorted by name.
func Env(passthrough []string, extra map[string]string) []string {
	env, _ := EnvFrom(os.LookupEnv, passthrough, extra)
	return env
}

// EnvFrom is Env reading the caller's environment through lookup; it also answers the
// passthrough names that lookup does not find, in the order given.
func EnvFrom(lookup func(string) (string, bool), passthrough []string, extra map[string]string) (env, missing []string) {
	vars := map[string]string{}
	for _, name := range BaseEnvNames {
		if v, ok := lookup(name); ok {
			vars[name] = v
		}
	}
	if _, ok := vars["PATH"]; !ok {
		vars["PATH"] = DefaultPath
	}
	for k, v := range extra {
		vars[k] = v
	}
	for _, name := range passthrough {
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
			continue
		}
		vars[name] = v
	}
	env = make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, missing
}
