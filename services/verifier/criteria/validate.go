package criteria

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"buf.build/go/protovalidate"
	"github.com/bmatcuk/doublestar/v4"
	"google.golang.org/protobuf/proto"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Violation is one problem in structured criteria: the field path, in protovalidate's notation
// relative to the Criterion (e.g. "command.expect.stdout.matches[0]"), and what is wrong.
type Violation struct {
	// Field is the path of the offending value; "" for the criterion as a whole.
	Field string
	// Description says what is wrong.
	Description string
}

func (v Violation) String() string {
	if v.Field == "" {
		return v.Description
	}
	return v.Field + ": " + v.Description
}

// validator checks the contract's protovalidate rules; building it compiles the rules once.
var validator = sync.OnceValues(func() (protovalidate.Validator, error) { return protovalidate.New() })

// Validate checks one criterion against the contract's rules (those protovalidate enforces on
// requests) and the rules only code can check: regexes compile as RE2, JSON values parse, URLs
// and globs are well-formed. A criterion that passes can be run.
func Validate(c *verifierv1.Criterion) []Violation {
	var out []Violation
	v, err := validator()
	if err != nil {
		// The rules are compiled from the generated descriptors: failing is a bug.
		panic(fmt.Sprintf("criteria: protovalidate: %v", err))
	}
	if err := v.Validate(c); err != nil {
		var verr *protovalidate.ValidationError
		if !errors.As(err, &verr) {
			panic(fmt.Sprintf("criteria: protovalidate: %v", err))
		}
		for _, viol := range verr.Violations {
			d := viol.Proto.GetMessage()
			if d == "" {
				d = "violates rule " + viol.Proto.GetRuleId()
			}
			out = append(out, Violation{Field: protovalidate.FieldPathString(viol.Proto.GetField()), Description: d})
		}
	}
	return append(out, Semantic(c)...)
}

// Semantic checks what protovalidate cannot: regexes compile, JSON values parse, http URLs have a
// host, globs parse. Verify runs it on structured criteria (protovalidate already ran on the
// request); Validate runs both.
func Semantic(c *verifierv1.Criterion) []Violation {
	var out []Violation
	add := func(field, format string, args ...any) {
		out = append(out, Violation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	text := func(path string, t *verifierv1.TextExpectation) {
		for i, re := range t.GetMatches() {
			if _, err := regexp.Compile(re); err != nil {
				add(fmt.Sprintf("%s.matches[%d]", path, i), "regex does not compile: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
			}
		}
	}
	jsonFields := func(path string, fields []*verifierv1.JsonFieldExpectation) {
		for i, f := range fields {
			if f.GetEqualsJson() == "" {
				continue
			}
			if err := checkJSON(f.GetEqualsJson()); err != nil {
				add(fmt.Sprintf("%s[%d].equals_json", path, i), "not JSON: %v", err)
			}
		}
	}
	switch {
	case c.GetCommand() != nil:
		for i, g := range c.GetCommand().GetReads() {
			if !doublestar.ValidatePattern(g) {
				add(fmt.Sprintf("command.reads[%d]", i), "glob does not parse (check its brackets and braces)")
			}
		}
		e := c.GetCommand().GetExpect()
		text("command.expect.stdout", e.GetStdout())
		text("command.expect.stderr", e.GetStderr())
		jsonFields("command.expect.stdout_json", e.GetStdoutJson())
	case c.GetHttp() != nil:
		h := c.GetHttp()
		if raw := h.GetUrl(); raw != "" {
			if u, err := url.Parse(raw); err != nil || u.Host == "" {
				add("http.url", "must be an absolute http or https URL with a host")
			}
		}
		text("http.expect.body", h.GetExpect().GetBody())
		jsonFields("http.expect.body_json", h.GetExpect().GetBodyJson())
	case c.GetFile() != nil:
		f := c.GetFile()
		if g := f.GetGlob(); g != "" && !doublestar.ValidatePattern(g) {
			add("file.glob", "glob does not parse (check its brackets and braces)")
		}
		text("file.expect.content", f.GetExpect().GetContent())
	case c.GetGrpc() != nil:
		g := c.GetGrpc()
		if req := g.GetUnary().GetRequestJson(); req != "" {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(req), &obj); err != nil {
				add("grpc.unary.request_json", "not a JSON object: %v", err)
			}
		}
		jsonFields("grpc.expect.response_json", g.GetExpect().GetResponseJson())
	}
	return out
}

func checkJSON(s string) error {
	var v any
	return json.Unmarshal([]byte(s), &v)
}

// Hash identifies criteria whatever their spelling: the lowercase hex SHA-256 of the
// deterministic protobuf encoding of the CriteriaSet with source lines cleared.
func Hash(criteria []*verifierv1.Criterion) string {
	set := &verifierv1.CriteriaSet{Criteria: make([]*verifierv1.Criterion, len(criteria))}
	for i, c := range criteria {
		c = proto.CloneOf(c)
		c.SourceLine = 0
		set.Criteria[i] = c
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		// Criteria hold only valid UTF-8 strings: marshalling cannot fail.
		panic(fmt.Sprintf("criteria: hash: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
