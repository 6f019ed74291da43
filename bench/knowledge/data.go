package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// The synthetic knowledge base: a monorepo of a few thousand directories with the usual file
// types, and items whose patterns have the shapes agents record (literal files, directory
// globs, extension globs anywhere, braces, classes), confidences and ages spread out.

var (
	roots = []string{"src", "server", "client", "database", "docs", "scripts", "config", "tests", "packages",
		"services", "internal", "cmd", "pkg", "web", "api", "lib", "tools", "deploy", "app", "infra"}
	words = []string{"auth", "users", "habits", "billing", "routes", "models", "views", "components", "hooks",
		"utils", "migrations", "seeds", "handlers", "middleware", "store", "cache", "queue", "jobs", "events",
		"metrics", "admin", "settings", "search", "reports", "payments", "orders", "catalog", "media", "mail",
		"notifications", "sessions", "profiles", "teams", "projects", "tasks", "comments", "files", "exports",
		"imports", "sync", "graph", "schema", "fixtures", "e2e", "unit", "v1", "v2", "internal", "core", "shared"}
	// extensions, weighted by how common such files are.
	extensions = weighted([]string{"ts", "tsx", "go", "py", "sql", "md", "json", "yaml", "js", "css", "html", "rs",
		"java", "sh", "proto", "toml"}, []int{20, 10, 15, 10, 5, 5, 5, 5, 5, 3, 2, 3, 3, 2, 2, 1})
	basenames = []string{"index", "main", "server", "client", "types", "api", "config", "handler", "service",
		"model", "schema", "routes", "app", "utils", "helpers", "constants", "errors", "setup", "001_init",
		"002_users", "003_habits", "README", "docker-compose", "package", "Makefile", "Dockerfile"}
	tagWords = []string{"sqlite", "postgres", "react", "api", "auth", "migrations", "testing", "security",
		"performance", "typescript", "go", "python", "ci", "docker", "css"}
	sentence = []string{"always", "never", "check", "wrap", "validate", "escape", "close", "retry", "the",
		"request", "response", "connection", "transaction", "migration", "timestamp", "index", "column",
		"handler", "context", "error", "timeout", "token", "session", "cache", "query", "import", "export",
		"before", "after", "returning", "because", "otherwise", "breaks", "fails", "leaks", "deadlocks"}
	types = weighted([]string{string(store.TypeGotcha), string(store.TypePattern), string(store.TypeDecision),
		string(store.TypeDiscovery)}, []int{50, 20, 15, 15})
)

// weighted repeats each value by its weight, so a uniform pick follows the weights.
func weighted(values []string, weights []int) []string {
	var out []string
	for i, v := range values {
		for range weights[i] {
			out = append(out, v)
		}
	}
	return out
}

// repo is the synthetic repository's directory tree.
type repo struct {
	dirs []string
}

// newRepo makes n directories of depth 1 to 5.
func newRepo(rng *rand.Rand, n int) *repo {
	seen := map[string]bool{}
	r := &repo{}
	for len(r.dirs) < n {
		parts := []string{pick(rng, roots)}
		for range rng.IntN(5) {
			parts = append(parts, pick(rng, words))
		}
		d := strings.Join(parts, "/")
		if !seen[d] {
			seen[d] = true
			r.dirs = append(r.dirs, d)
		}
	}
	return r
}

// file returns a file path in the repository.
func (r *repo) file(rng *rand.Rand) string {
	return pick(rng, r.dirs) + "/" + r.name(rng)
}

func (r *repo) name(rng *rand.Rand) string {
	base := pick(rng, basenames)
	if base == "Makefile" || base == "Dockerfile" {
		return base
	}
	return base + "." + pick(rng, extensions)
}

// pattern returns a pattern of one of the shapes agents record, with its share of all items.
func (r *repo) pattern(rng *rand.Rand) string {
	dir := pick(rng, r.dirs)
	ext := pick(rng, extensions)
	switch p := rng.IntN(100); {
	case p < 40: // one file
		return dir + "/" + r.name(rng)
	case p < 50:
		return dir + "/*"
	case p < 65:
		return dir + "/*." + ext
	case p < 75:
		return dir + "/**/*." + ext
	case p < 80:
		return dir + "/**"
	case p < 84: // floating: any depth
		return "*." + ext
	case p < 86:
		return "**/" + pick(rng, words) + "/**"
	case p < 87:
		return "*_test." + ext
	case p < 88:
		return pick(rng, []string{"Makefile", "Dockerfile", "package.json", "go.mod", ".env"})
	case p < 93:
		return dir + "/*.{ts,tsx}"
	case p < 95:
		return dir + "/v?/*." + ext
	default:
		return dir + "/" + pick(rng, basenames)[:2] + "*"
	}
}

// item returns the n-th item of the knowledge base at now.
func (r *repo) item(rng *rand.Rand, n int, now time.Time) store.Row {
	pattern, err := repopath.CleanGlob(r.pattern(rng))
	if err != nil {
		panic(fmt.Sprintf("bench: generated pattern %q: %v", pattern, err))
	}
	words := make([]string, 8+rng.IntN(10))
	for i := range words {
		words[i] = pick(rng, sentence)
	}
	content := strings.ToUpper(words[0][:1]) + words[0][1:] + " " + strings.Join(words[1:], " ") + fmt.Sprintf(" (#%d)", n)
	var tags []string
	for range rng.IntN(4) {
		if t := pick(rng, tagWords); !contains(tags, t) {
			tags = append(tags, t)
		}
	}
	confirmed := now.Add(-time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
	row := store.NewRow(store.NewItem{
		Type:        store.Type(pick(rng, types)),
		Content:     content,
		FilePattern: pattern,
		Tags:        tags,
		Confidence:  0.3 + 0.69*rng.Float64(),
		Source:      store.Source{ExecutionID: fmt.Sprintf("ex-%d", rng.IntN(5000)), TaskID: fmt.Sprintf("%d.%d", rng.IntN(20), rng.IntN(10)), AgentID: fmt.Sprintf("agent-%d", rng.IntN(64))},
		Evidence:    "task output: " + strings.Join(words[:4], " "),
	}, confirmed)
	return row
}

func pick(rng *rand.Rand, from []string) string { return from[rng.IntN(len(from))] }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
