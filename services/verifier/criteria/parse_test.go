package criteria_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/criteria"
)

// examples are the done-criteria documents of the project's examples/ folder.
func examples(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../../examples/criteria/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		out[filepath.Base(p)] = string(b)
	}
	return out
}

func TestParseExamples(t *testing.T) {
	t.Parallel()
	for name, doc := range examples(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := criteria.Parse(doc)
			require.NoError(t, err)
			require.NotEmpty(t, res.Criteria)
			require.Empty(t, res.Warnings, "the examples are written by the book")
			for _, c := range res.Criteria {
				require.Empty(t, criteria.Validate(c), "criterion %s", c.GetId())
			}
			requireRoundTrip(t, res)
		})
	}
}

// requireRoundTrip checks that Format writes res's criteria as a document that parses to the
// same criteria, with the same hash.
func requireRoundTrip(t *testing.T, res *criteria.Result) {
	t.Helper()
	doc := criteria.Format("round trip", res.Criteria)
	again, err := criteria.Parse(doc)
	require.NoError(t, err, "the formatted document:\n%s", doc)
	require.Equal(t, res.Hash, again.Hash, "the formatted document:\n%s", doc)
	require.Len(t, again.Criteria, len(res.Criteria))
	for i := range res.Criteria {
		want, got := proto.CloneOf(res.Criteria[i]), proto.CloneOf(again.Criteria[i])
		want.SourceLine, got.SourceLine = 0, 0
		requireEqual(t, want, got, "criterion %d of:\n%s", i, doc)
	}
}

func TestParseInventoryExport(t *testing.T) {
	t.Parallel()
	res, err := criteria.Parse(examples(t)["inventory-export.md"])
	require.NoError(t, err)
	ids := make([]string, len(res.Criteria))
	for i, c := range res.Criteria {
		ids[i] = c.GetId()
	}
	require.Equal(t, []string{"F1", "F2", "F3", "F4", "F5", "E1", "P1", "P2", "U1"}, ids)

	f1 := res.Criteria[0]
	require.Equal(t, "Inventory API answers", f1.GetName())
	require.Equal(t, verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY, f1.GetTag())
	require.Equal(t, int32(6), f1.GetSourceLine())
	require.Equal(t, []string{"app/server.go"}, f1.GetRelatedFiles())
	require.Equal(t, "`GET /api/inventory` answers 200 with the items as JSON, quickly.", f1.GetDescription())
	require.Equal(t, "/api/inventory", f1.GetHttp().GetPath())
	require.Equal(t, int32(200), f1.GetHttp().GetExpect().GetStatus())
	require.Equal(t, map[string]string{"Content-Type": "application/json"}, f1.GetHttp().GetExpect().GetHeaderContains())
	require.Equal(t, "3", f1.GetHttp().GetExpect().GetBodyJson()[0].GetEqualsJson())
	require.True(t, proto.Equal(durationpb.New(2e9), f1.GetHttp().GetExpect().GetMaxLatency()))

	f2 := res.Criteria[1]
	require.Equal(t, "write the header row sku,name,location,quantity before the rows", f2.GetFixHint())

	f5 := res.Criteria[4]
	require.Equal(t, []string{"cat", "VERSION"}, f5.GetCommand().GetArgv())
	require.Equal(t, int32(0), f5.GetCommand().GetExpect().GetExitCode())
	require.NotNil(t, f5.GetCommand().GetExpect().ExitCode, "an explicit exit_code: 0 is kept")

	p1 := res.Criteria[6]
	require.Equal(t, verifierv1.CriterionTag_CRITERION_TAG_TOOL_VERIFY, p1.GetTag())
	require.NotNil(t, p1.GetGrpc().GetHealth())

	u1 := res.Criteria[8]
	require.Equal(t, verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY, u1.GetTag())
	require.Nil(t, u1.GetCheck())
	require.Len(t, res.Hash, 64)
}

func TestParseSpellings(t *testing.T) {
	t.Parallel()
	// The same criterion, written in the spellings the format accepts.
	want := &verifierv1.Criterion{
		Id:           "F1",
		Name:         "Tests pass",
		Tag:          verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
		Description:  "Everything is green.",
		FixHint:      "run go test",
		RelatedFiles: []string{"a.go", "b.go"},
		Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{
			Shell:   "go test ./...",
			Timeout: durationpb.New(120e9),
			Expect: &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{
				Contains: []string{"ok"},
			}},
		}},
	}
	docs := map[string]string{
		"plain": "## F1: Tests pass\nTag: AUTO_VERIFY\nFiles: a.go, b.go\nFix: run go test\n\nEverything is green.\n\n" +
			"```check\ncommand:\n  shell: go test ./...\n  timeout: 2m\n  expect:\n    stdout:\n      contains: [ok]\n```\n",
		"bold keys, dash, list items, JSON block, camelCase": "# Title\n\nIntro.\n\n### F1 — Tests pass ###\n- **Tag:** `AUTO_VERIFY`\n" +
			"- **Files**: `a.go`, `b.go`\n- Fix: run go test\n\nEverything is green.\n\n" +
			"~~~check json\n{\"command\": {\"shell\": \"go test ./...\", \"timeout\": 120, \"expect\": {\"stdout\": {\"contains\": \"ok\"}}}}\n~~~\n",
		"CRLF and the check before the prose": "## F1 - Tests pass\r\nTag: auto_verify\r\n```check\r\ncommand:\r\n  shell: go test ./...\r\n" +
			"  timeout: 120s\r\n  expect: {stdout: {contains: [ok]}}\r\n```\r\nEverything is green.\r\nFiles: a.go,b.go\r\nFix: run go test\r\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := criteria.Parse(doc)
			require.NoError(t, err)
			require.Len(t, res.Criteria, 1)
			got := res.Criteria[0]
			got.SourceLine = 0
			requireEqual(t, want, got)
		})
	}
}

// A command check declares the files it reads (for the validation cache) as a list of globs.
func TestParseCommandReads(t *testing.T) {
	t.Parallel()
	res, err := criteria.Parse("## F1: x\nTag: AUTO_VERIFY\n\n```check\ncommand:\n  shell: sh export.sh\n  reads: [export.sh, 'data/**']\n```\n")
	require.NoError(t, err)
	require.Equal(t, []string{"export.sh", "data/**"}, res.Criteria[0].GetCommand().GetReads())
	require.Contains(t, criteria.Format("", res.Criteria), "  reads:\n    - export.sh\n    - data/**\n")
}

func TestParseSections(t *testing.T) {
	t.Parallel()
	doc := strings.Join([]string{
		"# Done criteria", // 1
		"",                // 2
		"## F1: First",    // 3
		"Tag: HUMAN_VERIFY",
		"",
		"```bash", // 6: a code block in the prose is prose, headings in it are not criteria
		"## F9: not a criterion",
		"```",
		"### Details", // 9: a deeper heading stays in the section
		"more",
		"## Notes", // 11: a heading as high as the criterion's ends it
		"Tag: AUTO_VERIFY",
		"## E1: Second", // 13
		"Tag: HUMAN_VERIFY",
	}, "\n")
	res, err := criteria.Parse(doc)
	require.NoError(t, err)
	require.Len(t, res.Criteria, 2)
	require.Equal(t, "```bash\n## F9: not a criterion\n```\n### Details\nmore", res.Criteria[0].GetDescription())
	require.Equal(t, int32(13), res.Criteria[1].GetSourceLine())
}

func TestParseWarnings(t *testing.T) {
	t.Parallel()
	doc := "## SEC1: Secrets stay out\nTag: HUMAN_VERIFY\n\n```check\ncommand: {shell: 'true'}\n```\n"
	res, err := criteria.Parse(doc)
	require.NoError(t, err)
	require.Len(t, res.Warnings, 2)
	require.Equal(t, int32(1), res.Warnings[0].GetLine())
	require.Contains(t, res.Warnings[0].GetMessage(), "convention")
	require.Equal(t, int32(4), res.Warnings[1].GetLine())
	require.Equal(t, "SEC1", res.Warnings[1].GetCriterionId())
	require.Contains(t, res.Warnings[1].GetMessage(), "ignored")
	require.Nil(t, res.Criteria[0].GetCheck())
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	check := func(block string) string {
		return "## F1: x\nTag: AUTO_VERIFY\n\n```check\n" + block + "\n```\n"
	}
	cases := []struct {
		name string
		doc  string
		line int
		want string
	}{
		{"empty document", "   \n", 1, "no criteria found"},
		{"no criteria", "# Title\n\nSome prose.\n", 1, "no criteria found"},
		{"unknown check kind", check("ftp:\n  url: ftp://x"), 5, `unknown check kind "ftp"`},
		{"malformed regex", check("command:\n  argv: [ls]\n  expect:\n    stdout:\n      matches: ['(unclosed']"), 9, "regex does not compile: missing closing )"},
		{"URL scheme", check("http:\n  url: ftp://example.com/x"), 6, "URL scheme must be http or https"},
		{"unknown key", check("http:\n  path: /x\n  expect:\n    stauts: 200"), 8, `unknown key "stauts"`},
		{"two kinds", check("command: {argv: [ls]}\nfile: {path: x}"), 6, "one check per criterion"},
		{"argv and shell", check("command:\n  argv: [ls]\n  shell: ls"), 5, "exactly one of argv and shell"},
		{"exclusive oneof", check("http:\n  url: http://x\n  path: /x"), 7, "url and path are exclusive"},
		{"bad duration", check("command:\n  argv: [ls]\n  timeout: soon"), 7, `"soon" is not a duration`},
		{"duration out of range", check("command:\n  argv: [ls]\n  timeout: 2h"), 7, "less than or equal to 3600s"},
		{"bad enum", check("file:\n  path: x\n  expect:\n    presence: maybe"), 8, `unknown value "maybe" (want EXISTS, ABSENT)`},
		{"not JSON", check("command:\n  argv: [ls]\n  expect:\n    stdout_json:\n      - {path: /a, equals_json: '{'}"), 9, "not JSON"},
		{"absolute path", check("file:\n  path: /etc/passwd"), 6, "target-relative path"},
		{"YAML syntax", check("command:\n  argv: [ls"), 5, "not valid YAML"},
		{"empty block", check(""), 4, "check block is empty"},
		{"check outside a criterion", "```check\ncommand: {argv: [ls]}\n```\n## F1: x\nTag: HUMAN_VERIFY\n", 1, "outside a criterion"},
		{"missing tag", "## F1: x\n", 1, "has no tag"},
		{"unknown tag", "## F1: x\nTag: EYEBALL_VERIFY\n", 2, `unknown tag "EYEBALL_VERIFY"`},
		{"missing check", "## F1: x\nTag: AUTO_VERIFY\n", 1, "AUTO_VERIFY criterion F1 has no check"},
		{"missing name", "## F1:\nTag: HUMAN_VERIFY\n", 1, "has no name"},
		{"duplicate id", "## F1: x\nTag: HUMAN_VERIFY\n## F1: y\nTag: HUMAN_VERIFY\n", 3, "duplicate criterion id F1, first defined at line 1"},
		{"unclosed fence", "## F1: x\nTag: HUMAN_VERIFY\n```\ncode\n", 3, "never closed"},
		{"second check block", check("command: {argv: [ls]}") + "```check\ncommand: {argv: [ls]}\n```\n", 7, "second check block"},
		{"not UTF-8", "## F1: x\nTag: HUMAN_VERIFY\n\xff\n", 3, "not valid UTF-8"},
		{"oversize", strings.Repeat("x", criteria.MaxBytes+1), 1, "more than the limit"},
		{"bad glob", check("file:\n  glob: 'src/[a'"), 6, "glob does not parse"},
		{"bad reads glob", check("command:\n  argv: [ls]\n  reads: [ok.go, 'src/{a']"), 7, "command.reads[1]: glob does not parse"},
		{"absolute reads", check("command:\n  argv: [ls]\n  reads: [/etc/passwd]"), 7, "target-relative glob"},
		{"reads up", check("command:\n  argv: [ls]\n  reads: ['../x/**']"), 7, "target-relative glob"},
		{"bad env name", check("command:\n  argv: [ls]\n  env: {'1X': y}"), 7, `command.env["1X"]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := criteria.Parse(tc.doc)
			var perr *criteria.Error
			require.ErrorAs(t, err, &perr)
			require.NotEmpty(t, perr.Problems)
			found := false
			for _, p := range perr.Problems {
				if strings.Contains(p.Message, tc.want) {
					found = true
					require.Equal(t, tc.line, p.Line, "line of %q", p.Message)
				}
			}
			require.True(t, found, "no problem says %q: %v", tc.want, perr)
		})
	}
}

func TestParseManyProblems(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 300 {
		b.WriteString("## F1: again\n")
		_ = i
	}
	_, err := criteria.Parse(b.String())
	var perr *criteria.Error
	require.ErrorAs(t, err, &perr)
	require.Len(t, perr.Problems, criteria.MaxProblems)
}

func TestParseTooManyCriteria(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range criteria.MaxCriteria + 1 {
		b.WriteString("## U" + strings.Repeat("1", 1) + string(rune('A'+i%26)) + itoa(i) + ": x\nTag: HUMAN_VERIFY\n")
	}
	_, err := criteria.Parse(b.String())
	var perr *criteria.Error
	require.ErrorAs(t, err, &perr)
	require.Contains(t, perr.Error(), "more than 500 criteria")
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func TestHashIgnoresSpelling(t *testing.T) {
	t.Parallel()
	a, err := criteria.Parse("## F1: x\nTag: AUTO_VERIFY\n```check\ncommand: {argv: [ls], timeout: 1m}\n```\n")
	require.NoError(t, err)
	b, err := criteria.Parse("# Title\n\n### F1 - x\n**Tag:** AUTO_VERIFY\n\n~~~check\n{\"command\": {\"argv\": \"ls\", \"timeout\": \"60s\"}}\n~~~\n")
	require.NoError(t, err)
	require.Equal(t, a.Hash, b.Hash)
	c, err := criteria.Parse("## F1: x\nTag: AUTO_VERIFY\n```check\ncommand: {argv: [ls, -l]}\n```\n")
	require.NoError(t, err)
	require.NotEqual(t, a.Hash, c.Hash)
}

func TestFormatStructured(t *testing.T) {
	t.Parallel()
	// Criteria built as structs (the CriteriaSet side) format to a document that parses back.
	set := []*verifierv1.Criterion{
		{
			Id: "F1", Name: "Health", Tag: verifierv1.CriterionTag_CRITERION_TAG_TOOL_VERIFY,
			Check: &verifierv1.Criterion_Grpc{Grpc: &verifierv1.GrpcCheck{
				Address:  "127.0.0.1:7070",
				Security: verifierv1.TransportSecurity_TRANSPORT_SECURITY_TLS_SKIP_VERIFY,
				Call:     &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}},
				Metadata: map[string]string{"x-b": "2", "x-a": "1"},
			}},
		},
		{
			Id: "F2", Name: "Quoted: values \"true\" and 123", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Description: "Line one.\n\n```\n## not a heading\n```",
			Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{
				Target: &verifierv1.FileCheck_Glob{Glob: "**/*.sql"},
				Expect: &verifierv1.FileExpectation{
					Content:    &verifierv1.TextExpectation{Contains: []string{"true", "123", "- x", "a: b", "```"}},
					MinMatches: proto.Int32(0),
					MaxLines:   proto.Int64(10),
				},
			}},
		},
	}
	res := &criteria.Result{Criteria: set, Hash: criteria.Hash(set)}
	requireRoundTrip(t, res)
}

// requireEqual fails t unless the two messages are equal, showing both.
func requireEqual(t *testing.T, want, got proto.Message, msgAndArgs ...any) {
	t.Helper()
	if !proto.Equal(want, got) {
		require.Equal(t, prototext.Format(want), prototext.Format(got), msgAndArgs...)
		require.Fail(t, "messages differ", msgAndArgs...)
	}
}
