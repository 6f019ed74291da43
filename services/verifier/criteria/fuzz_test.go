package criteria_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/converge-dev/converge/services/verifier/criteria"
)

// FuzzParse holds the parser to two promises, whatever the document: it never panics, and what
// it accepts round-trips (Format writes it back as a document that parses to the same criteria).
//
//	go test -fuzz FuzzParse ./criteria
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("../../../examples/criteria/*.md")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	for _, seed := range []string{
		"## F1: x\nTag: HUMAN_VERIFY\n",
		"## F1: x\nTag: AUTO_VERIFY\n```check\ncommand: {argv: [ls], timeout: 1s}\n```\n",
		"## F1 - x\n**Tag:** TOOL_VERIFY\nFiles: a, b\nFix: **do it**\n~~~check\n{\"grpc\": {\"health\": {}, \"metadata\": {\"k\": \"v\"}}}\n~~~\n",
		"## F1: x\nTag: AUTO_VERIFY\n```check\nhttp: {path: /x, expect: {status: 200, body: {matches: ['(?m)^ok$']}}}\n```\n",
		"## F1: x\nTag: AUTO_VERIFY\n```check\nfile: {glob: '**/*.go', expect: {min_matches: 1, content: {not_contains: [TODO]}}}\n```\n",
		"## F1: x\nTag: AUTO_VERIFY\n```check\ncommand: &a {argv: *a}\n```\n",
		"## F1: x\nTag: AUTO_VERIFY\n```check\ncommand: {shell: 'sh x.sh', reads: [x.sh, 'data/**', 'src/{a,b}/*.go']}\n```\n",
		"```check\n```\n## F1: x ##\n```\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		res, err := criteria.Parse(doc)
		if err != nil {
			return
		}
		requireRoundTrip(t, res)
	})
}
