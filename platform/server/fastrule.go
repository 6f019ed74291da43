package server

import (
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
)

// The compiled fast path of the protos' plain string rules, beside the path rule (pathrule.go).
// Most string fields of a request carry only an id pattern ("^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"),
// a length bound, and a CEL rule refusing characters ("string.no_nul", "string.no_control",
// "string.text": `!this.matches(r'[...]')`). protovalidate evaluates each through its regular
// expression or a CEL program: on ClaimTask, ReportProgress and CompleteTask that was most of
// the validation's cost (bench/PROFILE.md). For a field whose rules are exactly a combination of
//
//   - string.pattern, when the pattern is anchored (^…$) and made of character classes of which
//     all but the last have a fixed count (e.g. one [A-Za-z0-9], then [A-Za-z0-9._:-]{0,127}),
//     optionally as a whole ("^(…)?$");
//   - string.min_len / max_len (runes) and min_bytes / max_bytes;
//   - CEL rules `!this.matches(r'X')` where X is one ASCII character or an ASCII class;
//   - ignore (any: ignoring only removes checks);
//
// (or a repeated field whose items have exactly such rules, with min_items, max_items and unique
// beside), a value that passes every check here is skipped by protovalidate: it would pass
// every rule of the field. Each check here is exact (a pattern only for ASCII values: any other
// value goes to protovalidate), and any value that fails one is evaluated by protovalidate as
// before, so a bad request gets the same violations (TestStringFastPathAgreesWithProtovalidate,
// FuzzStringFastPath).

// byteSet is a set of ASCII bytes.
type byteSet [2]uint64

func (b *byteSet) add(c rune)      { b[c>>6] |= 1 << (c & 63) }
func (b *byteSet) has(c byte) bool { return c < 0x80 && b[c>>6]&(1<<(c&63)) != 0 }
func (b *byteSet) union(o byteSet) { b[0], b[1] = b[0]|o[0], b[1]|o[1] }
func (b byteSet) empty() bool      { return b[0] == 0 && b[1] == 0 }
func (b *byteSet) addRange(lo, hi rune) {
	for c := lo; c <= hi && c < 0x80; c++ {
		b.add(c)
	}
}

// strRule is the compiled rules of one string field (or of a list's items).
type strRule struct {
	forbid                 byteSet // bytes a CEL rule refuses
	minLen, maxLen         uint64  // runes
	minBytes, maxBytes     uint64
	hasMaxLen, hasMaxBytes bool
	pattern                *asciiPattern // nil: none
}

// ok reports whether s passes every rule of r.
func (r *strRule) ok(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			ascii = false
		} else if r.forbid.has(c) {
			return false
		}
	}
	n := uint64(len(s))
	if n < r.minBytes || (r.hasMaxBytes && n > r.maxBytes) {
		return false
	}
	runes := n
	if !ascii {
		if !utf8.ValidString(s) {
			return false // refused on the wire anyway; protovalidate answers
		}
		runes = uint64(utf8.RuneCountInString(s))
	}
	if runes < r.minLen || (r.hasMaxLen && runes > r.maxLen) {
		return false
	}
	if r.pattern != nil {
		return ascii && r.pattern.match(s)
	}
	return true
}

// stringRule compiles rules, or answers nil when they hold anything the fast path does not
// check exactly.
func stringRule(rules *validatepb.FieldRules) *strRule {
	if rules == nil || !rules.HasString() || rules.GetRequired() {
		return nil
	}
	r := &strRule{}
	for _, c := range rules.GetCel() {
		set, ok := forbiddenClass(c.GetExpression())
		if !ok {
			return nil
		}
		r.forbid.union(set)
	}
	sr := rules.GetString()
	if sr.HasPattern() {
		p, ok := compilePattern(sr.GetPattern())
		if !ok {
			return nil
		}
		r.pattern = p
	}
	r.minLen, r.maxLen, r.hasMaxLen = sr.GetMinLen(), sr.GetMaxLen(), sr.HasMaxLen()
	r.minBytes, r.maxBytes, r.hasMaxBytes = sr.GetMinBytes(), sr.GetMaxBytes(), sr.HasMaxBytes()
	restString := proto.CloneOf(sr)
	restString.ClearPattern()
	restString.ClearMinLen()
	restString.ClearMaxLen()
	restString.ClearMinBytes()
	restString.ClearMaxBytes()
	rest := proto.CloneOf(rules)
	rest.SetCel(nil)
	rest.ClearString()
	rest.ClearIgnore()
	if !proto.Equal(restString, &validatepb.StringRules{}) || !proto.Equal(rest, &validatepb.FieldRules{}) {
		return nil
	}
	return r
}

// forbiddenClass answers the bytes a CEL rule `!this.matches(r'X')` refuses, for X one ASCII
// character or a class of ASCII characters (matches is a search: the rule holds exactly when no
// byte of the string is in the class, for a UTF-8 string).
func forbiddenClass(expr string) (byteSet, bool) {
	const prefix, suffix = "!this.matches(r'", "')"
	inner, ok := strings.CutPrefix(expr, prefix)
	if !ok {
		return byteSet{}, false
	}
	if inner, ok = strings.CutSuffix(inner, suffix); !ok || strings.ContainsAny(inner, `'"`) {
		return byteSet{}, false
	}
	re, err := syntax.Parse(inner, syntax.Perl)
	if err != nil {
		return byteSet{}, false
	}
	var set byteSet
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) != 1 || re.Rune[0] >= 0x80 || re.Flags&syntax.FoldCase != 0 {
			return byteSet{}, false
		}
		set.add(re.Rune[0])
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i+1] >= 0x80 {
				return byteSet{}, false
			}
			set.addRange(re.Rune[i], re.Rune[i+1])
		}
	default:
		return byteSet{}, false
	}
	return set, !set.empty()
}

// asciiPattern is an anchored pattern of character classes: every item but the last has a fixed
// count, so a match is positional (no backtracking). optional: the empty string matches too.
type asciiPattern struct {
	items    []patItem
	optional bool
}

// patItem is a class repeated min to max times (max < 0: unbounded).
type patItem struct {
	class    byteSet
	min, max int
}

// match reports whether the ASCII string s matches p.
func (p *asciiPattern) match(s string) bool {
	if p.optional && s == "" {
		return true
	}
	i := 0
	for k, it := range p.items {
		if k < len(p.items)-1 {
			for range it.min {
				if i >= len(s) || !it.class.has(s[i]) {
					return false
				}
				i++
			}
			continue
		}
		if rest := len(s) - i; rest < it.min || (it.max >= 0 && rest > it.max) {
			return false
		}
		for ; i < len(s); i++ {
			if !it.class.has(s[i]) {
				return false
			}
		}
	}
	return i == len(s)
}

// compilePattern compiles an RE2 pattern (as protovalidate's string.pattern reads it) into an
// asciiPattern, or answers false for any other shape.
func compilePattern(pattern string) (*asciiPattern, bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil || re.Op != syntax.OpConcat || len(re.Sub) < 2 ||
		re.Sub[0].Op != syntax.OpBeginText || re.Sub[len(re.Sub)-1].Op != syntax.OpEndText {
		return nil, false
	}
	body := re.Sub[1 : len(re.Sub)-1]
	p := &asciiPattern{}
	if len(body) == 1 && body[0].Op == syntax.OpQuest {
		p.optional = true
		inner := body[0].Sub[0]
		if inner.Op == syntax.OpCapture {
			inner = inner.Sub[0]
		}
		body = []*syntax.Regexp{inner}
		if inner.Op == syntax.OpConcat {
			body = inner.Sub
		}
	}
	for _, sub := range body {
		items, ok := patItems(sub)
		if !ok {
			return nil, false
		}
		p.items = append(p.items, items...)
	}
	for _, it := range p.items[:max(len(p.items)-1, 0)] {
		if it.min != it.max {
			return nil, false
		}
	}
	return p, true
}

// patItems answers the items of one element of a pattern's concatenation.
func patItems(re *syntax.Regexp) ([]patItem, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		items := make([]patItem, 0, len(re.Rune))
		for _, c := range re.Rune {
			if c >= 0x80 {
				return nil, false
			}
			var set byteSet
			set.add(c)
			items = append(items, patItem{class: set, min: 1, max: 1})
		}
		return items, true
	case syntax.OpCharClass:
		var set byteSet
		for i := 0; i+1 < len(re.Rune); i += 2 {
			set.addRange(re.Rune[i], re.Rune[i+1])
		}
		return []patItem{{class: set, min: 1, max: 1}}, true
	case syntax.OpRepeat, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		one, ok := patItems(re.Sub[0])
		if !ok || len(one) != 1 {
			return nil, false
		}
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		return []patItem{{class: one[0].class, min: lo, max: hi}}, true
	}
	return nil, false
}
