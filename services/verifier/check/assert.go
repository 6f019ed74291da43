package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// actualLen is how many characters of an observation an assertion result quotes.
const actualLen = 160

// assertions collects the assertions of one check, in the order of its expectations.
type assertions struct {
	list []*verifierv1.AssertionResult
}

func (a *assertions) add(expectation string, passed bool, actual string) {
	a.list = append(a.list, &verifierv1.AssertionResult{
		Expectation: clean(expectation),
		Passed:      passed,
		Actual:      strings.Clone(clean(actual)), // never a substring that keeps a whole output alive
	})
}

func (a *assertions) passed() bool {
	for _, r := range a.list {
		if !r.Passed {
			return false
		}
	}
	return true
}

// clean makes s valid UTF-8 (outputs are bytes; protobuf strings must be UTF-8).
func clean(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// head answers the first n bytes of s, cut at a rune boundary, valid UTF-8.
func head(s string, n int) string {
	if len(s) <= n {
		return clean(s)
	}
	cut := n
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return clean(s[:cut])
}

// tail answers the last n bytes of s, cut at a rune boundary, valid UTF-8.
func tail(s string, n int) string {
	if len(s) <= n {
		return clean(s)
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return clean(s[cut:])
}

// quoteHead quotes the start of s for an assertion's actual value.
func quoteHead(s string) string {
	if s == "" {
		return "empty"
	}
	q := strconv.Quote(head(s, actualLen))
	if len(s) > actualLen {
		q += "…"
	}
	return q
}

// quoteTail quotes the end of s for an assertion's actual value.
func quoteTail(s string) string {
	if s == "" {
		return "empty"
	}
	q := strconv.Quote(tail(s, actualLen))
	if len(s) > actualLen {
		q = "…" + q
	}
	return q
}

// textSource is a text assertions are made on: its label in expectations ("stdout", "body")
// and how to quote it (the end of command output, the start of a body or file).
type textSource struct {
	label    string
	text     string
	fromEnd  bool
	numbered bool // lines are worth naming (file content)
}

func (s textSource) quote() string {
	if s.fromEnd {
		return quoteTail(s.text)
	}
	return quoteHead(s.text)
}

// regexCache holds compiled regexes: criteria were validated, so they compile.
var regexCache sync.Map // string → *regexp.Regexp

func compile(re string) (*regexp.Regexp, error) {
	if v, ok := regexCache.Load(re); ok {
		return v.(*regexp.Regexp), nil
	}
	r, err := regexp.Compile(re)
	if err != nil {
		return nil, err
	}
	regexCache.Store(re, r)
	return r, nil
}

// checkText adds the assertions of t on src. It answers the 1-based line of the first
// forbidden text found (0 when none), for failure locations.
func checkText(a *assertions, src textSource, t *verifierv1.TextExpectation) (badLine int32) {
	for _, s := range t.GetContains() {
		ok := strings.Contains(src.text, s)
		actual := "found"
		if !ok {
			actual = "not found in " + src.quote()
		}
		a.add(fmt.Sprintf("%s contains %q", src.label, s), ok, actual)
	}
	for _, s := range t.GetNotContains() {
		i := strings.Index(src.text, s)
		actual := "not found"
		if i >= 0 {
			line := strings.Count(src.text[:i], "\n") + 1
			actual = "found: " + quoteHead(lineAt(src.text, i))
			if src.numbered {
				actual += fmt.Sprintf(" (line %d)", line)
				if badLine == 0 {
					badLine = int32(line)
				}
			}
		}
		a.add(fmt.Sprintf("%s does not contain %q", src.label, s), i < 0, actual)
	}
	for _, re := range t.GetMatches() {
		r, err := compile(re)
		if err != nil {
			a.add(fmt.Sprintf("%s matches /%s/", src.label, re), false, "regex does not compile: "+err.Error())
			continue
		}
		loc := r.FindStringIndex(src.text)
		actual := "no match in " + src.quote()
		if loc != nil {
			actual = "matched " + quoteHead(src.text[loc[0]:loc[1]])
		}
		a.add(fmt.Sprintf("%s matches /%s/", src.label, re), loc != nil, actual)
	}
	return badLine
}

// lineAt answers the line of s holding byte i.
func lineAt(s string, i int) string {
	start := strings.LastIndexByte(s[:i], '\n') + 1
	end := strings.IndexByte(s[i:], '\n')
	if end < 0 {
		return s[start:]
	}
	return s[start : i+end]
}

// checkJSONFields adds the assertions of fields on the JSON document doc.
func checkJSONFields(a *assertions, label string, doc string, fields []*verifierv1.JsonFieldExpectation) {
	if len(fields) == 0 {
		return
	}
	v, err := decodeJSON(doc)
	for _, f := range fields {
		expectation := fmt.Sprintf("%s %s = %s", label, pointerName(f.GetPath()), f.GetEqualsJson())
		if f.GetEqualsJson() == "" {
			expectation = fmt.Sprintf("%s %s exists", label, pointerName(f.GetPath()))
		}
		if err != nil {
			a.add(expectation, false, fmt.Sprintf("%s is not JSON: %v", label, err))
			continue
		}
		got, ok := resolvePointer(v, f.GetPath())
		if !ok {
			a.add(expectation, false, "no value at "+pointerName(f.GetPath()))
			continue
		}
		actual := shortJSON(got)
		if f.GetEqualsJson() == "" {
			a.add(expectation, true, actual)
			continue
		}
		want, werr := decodeJSON(f.GetEqualsJson())
		if werr != nil {
			a.add(expectation, false, "expected value is not JSON: "+werr.Error())
			continue
		}
		a.add(expectation, jsonEqual(got, want), actual)
	}
}

func pointerName(p string) string {
	if p == "" {
		return "(document)"
	}
	return p
}

// decodeJSON parses one JSON document, keeping numbers exact.
func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// resolvePointer resolves an RFC 6901 JSON Pointer in v.
func resolvePointer(v any, pointer string) (any, bool) {
	if pointer == "" {
		return v, true
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur := v.(type) {
		case map[string]any:
			next, ok := cur[tok]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			v = cur[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// jsonEqual compares JSON values structurally: numbers by value, objects ignoring key order.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		if !okx || !oky {
			return string(x) == string(y)
		}
		return rx.Cmp(ry) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func shortJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSuffix(buf.String(), "\n")
	if len(s) > actualLen {
		return head(s, actualLen) + "…"
	}
	return s
}
