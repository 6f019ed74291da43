// Package criteria reads and writes done-criteria documents (docs/criteria.md of the project
// describes the format): markdown with one section per criterion, its tag, and for automatic
// criteria a ```check block saying how to check it. Parse turns a document into the structured
// criteria of the Verifier's contract, or into problems that each name a line; Format writes
// criteria back as a document that parses to the same criteria; Validate checks structured
// criteria the way Parse checks a document; Hash identifies criteria whatever their spelling.
package criteria

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Limits of a document (the same as the contract's).
const (
	// MaxBytes is the largest document Parse reads.
	MaxBytes = 1 << 20
	// MaxCriteria is the most criteria a document or a CriteriaSet may hold.
	MaxCriteria = 500
	// MaxProblems is the most problems an Error lists; parsing stops there.
	MaxProblems = 100
)

// Problem is one thing wrong in a document, at a 1-based line.
type Problem struct {
	// Line is the 1-based line of the document the problem is on.
	Line int
	// Message says what is wrong there.
	Message string
}

// Error is a document that does not parse: every problem found, in line order.
type Error struct {
	// Problems are at most MaxProblems, sorted by line.
	Problems []Problem
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = fmt.Sprintf("L%d: %s", p.Line, p.Message)
	}
	return "done-criteria do not parse: " + strings.Join(parts, "; ")
}

// Result is a parsed document.
type Result struct {
	// Criteria in document order, with SourceLine set.
	Criteria []*verifierv1.Criterion
	// Warnings are findings that did not stop parsing, in line order.
	Warnings []*verifierv1.ParseWarning
	// Hash identifies the criteria (see Hash).
	Hash string
}

var (
	// criterionHeading is an ATX heading that opens a criterion: `## F1: name`, also with
	// " - ", " – " or " — " after the id.
	criterionHeading = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+([A-Z][A-Z0-9_.-]*)(?:[ \t]*:|[ \t]+[-–—](?:[ \t]|$))[ \t]*(.*)$`)
	// heading is any ATX heading.
	heading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]|$)`)
	// closingHashes is the optional closing sequence of an ATX heading.
	closingHashes = regexp.MustCompile(`[ \t]+#+[ \t]*$`)
	// fenceOpen is the opening line of a fenced code block; group 2 is its info string.
	fenceOpen = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})[ \t]*(.*)$")
	// metadata is a `Tag:`, `Files:` or `Fix:` line, also as a list item or in bold.
	metadata = regexp.MustCompile(`^ {0,3}(?:[-*+][ \t]+)?(?:\*\*|__)?(Tag|Files|Fix)(?:\*\*|__)?[ \t]*:(?:\*\*|__)?[ \t]*(.*)$`)
	// conventionalID is the seed's id convention: a category letter and a number.
	conventionalID = regexp.MustCompile(`^[FEPU][0-9]+$`)
)

// section is a criterion being read.
type section struct {
	c         *verifierv1.Criterion
	level     int
	line      int      // heading line
	prose     []string // description lines
	tagLine   int
	filesLine int
	fixLine   int
	checkLine int    // opening fence of the check block, 0 if none
	checkText string // its content
}

// parser holds the state of one Parse.
type parser struct {
	problems []Problem
	warnings []*verifierv1.ParseWarning
	sections []*section
	cur      *section
}

func (p *parser) addf(line int, format string, args ...any) {
	p.problems = append(p.problems, Problem{Line: line, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) warnf(line int, id, format string, args ...any) {
	p.warnings = append(p.warnings, &verifierv1.ParseWarning{Line: int32(line), CriterionId: id, Message: fmt.Sprintf(format, args...)})
}

// Parse reads a done-criteria document. It answers the criteria, or an *Error listing every
// problem (at most MaxProblems), each with its line. It never panics, whatever the input.
func Parse(doc string) (*Result, error) {
	p := &parser{}
	if len(doc) > MaxBytes {
		p.addf(1, "document is %d bytes, more than the limit of %d", len(doc), MaxBytes)
		return nil, p.err()
	}
	if !utf8.ValidString(doc) {
		p.addf(invalidUTF8Line(doc), "document is not valid UTF-8")
		return nil, p.err()
	}
	lines := strings.Split(doc, "\n")
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\r")
	}
	p.scan(lines)
	if len(p.problems) == 0 && len(p.sections) == 0 {
		p.addf(1, "no criteria found: a criterion is a section headed like `## F1: Export button visible`")
	}
	criteria := p.build()
	if len(p.problems) > 0 {
		return nil, p.err()
	}
	sort.SliceStable(p.warnings, func(i, j int) bool { return p.warnings[i].Line < p.warnings[j].Line })
	return &Result{Criteria: criteria, Warnings: p.warnings, Hash: Hash(criteria)}, nil
}

// err answers the problems as an *Error, sorted by line and cut at MaxProblems.
func (p *parser) err() error {
	sort.SliceStable(p.problems, func(i, j int) bool { return p.problems[i].Line < p.problems[j].Line })
	if len(p.problems) > MaxProblems {
		p.problems = p.problems[:MaxProblems]
	}
	return &Error{Problems: p.problems}
}

// scan splits the document into criterion sections.
func (p *parser) scan(lines []string) {
	var (
		fence      string // the opening fence of the code block we are in, "" outside
		fenceLine  int
		fenceCheck bool // the block is a check block
		block      []string
	)
	for i, line := range lines {
		n := i + 1
		if len(p.problems) >= MaxProblems {
			return
		}
		if fence != "" {
			if isClosingFence(line, fence) {
				if fenceCheck {
					p.endCheck(fenceLine, strings.Join(block, "\n"))
				} else if p.cur != nil {
					p.cur.prose = append(p.cur.prose, line)
				}
				fence, block = "", nil
				continue
			}
			if fenceCheck {
				block = append(block, line)
			} else if p.cur != nil {
				p.cur.prose = append(p.cur.prose, line)
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil && !(m[1][0] == '`' && strings.Contains(m[2], "`")) {
			fence, fenceLine = m[1], n
			info := strings.Fields(m[2])
			fenceCheck = len(info) > 0 && info[0] == "check"
			if fenceCheck && p.cur == nil {
				p.addf(n, "check block outside a criterion: put it in the section of the criterion it checks")
				fenceCheck = false
			}
			if !fenceCheck && p.cur != nil {
				p.cur.prose = append(p.cur.prose, line)
			}
			continue
		}
		if m := criterionHeading.FindStringSubmatch(line); m != nil {
			p.startSection(n, len(m[1]), m[2], m[3])
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			if p.cur != nil && len(m[1]) <= p.cur.level {
				p.cur = nil // a heading as high as the criterion's ends its section
			} else if p.cur != nil {
				p.cur.prose = append(p.cur.prose, line)
			}
			continue
		}
		if p.cur == nil {
			continue // the document's own prose: title, introduction
		}
		if m := metadata.FindStringSubmatch(line); m != nil {
			p.metadata(n, m[1], m[2])
			continue
		}
		p.cur.prose = append(p.cur.prose, line)
	}
	if fence != "" {
		p.addf(fenceLine, "code block opened here is never closed (close it with %s)", fence)
	}
}

// isClosingFence reports whether line closes a block opened by fence: the same character, at
// least as many, nothing after but spaces.
func isClosingFence(line, fence string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	t = strings.TrimRight(t, " \t")
	if len(t) < len(fence) {
		return false
	}
	return strings.Trim(t, fence[:1]) == ""
}

func (p *parser) startSection(line, level int, id, name string) {
	if len(p.sections) >= MaxCriteria {
		p.addf(line, "more than %d criteria: split the document", MaxCriteria)
		p.cur = nil
		return
	}
	name = strings.TrimSpace(closingHashes.ReplaceAllString(name, ""))
	if name == "#" || strings.Trim(name, "#") == "" {
		name = ""
	}
	s := &section{
		c:     &verifierv1.Criterion{Id: id, Name: name, SourceLine: int32(line)},
		level: level,
		line:  line,
	}
	for _, prev := range p.sections {
		if prev.c.Id == id {
			p.addf(line, "duplicate criterion id %s, first defined at line %d", id, prev.line)
			break
		}
	}
	if name == "" {
		p.addf(line, "criterion %s has no name: write `## %s: what must be true`", id, id)
	}
	if !conventionalID.MatchString(id) {
		p.warnf(line, id, "id %s does not follow the convention of a category letter and a number (F1 functional, E1 error handling, P1 performance, U1 UI)", id)
	}
	p.sections = append(p.sections, s)
	p.cur = s
}

func (p *parser) metadata(line int, key, value string) {
	s := p.cur
	value = strings.TrimSpace(value)
	switch key {
	case "Tag":
		if s.tagLine != 0 {
			p.addf(line, "criterion %s has a second Tag line (first at line %d)", s.c.Id, s.tagLine)
			return
		}
		s.tagLine = line
		v := strings.Trim(value, "`[]* ")
		tag, ok := enumValue(verifierv1.CriterionTag(0).Descriptor(), v)
		if !ok || v == "" {
			p.addf(line, "unknown tag %q for criterion %s (want AUTO_VERIFY, HUMAN_VERIFY or TOOL_VERIFY)", value, s.c.Id)
			return
		}
		s.c.Tag = verifierv1.CriterionTag(tag)
	case "Files":
		if s.filesLine == 0 {
			s.filesLine = line
		}
		for _, f := range strings.Split(value, ",") {
			if f = strings.TrimSpace(strings.Trim(strings.TrimSpace(f), "`")); f != "" {
				s.c.RelatedFiles = append(s.c.RelatedFiles, f)
			}
		}
	case "Fix":
		if s.fixLine == 0 {
			s.fixLine = line
		}
		if value == "" {
			return
		}
		if s.c.FixHint != "" {
			s.c.FixHint += "\n"
		}
		s.c.FixHint += value
	}
}

// endCheck records the check block of the current criterion.
func (p *parser) endCheck(line int, text string) {
	s := p.cur
	if s.checkLine != 0 {
		p.addf(line, "criterion %s has a second check block (first at line %d): one check per criterion", s.c.Id, s.checkLine)
		return
	}
	s.checkLine, s.checkText = line, text
}

// build finishes every section into a Criterion: description, check, and validation.
func (p *parser) build() []*verifierv1.Criterion {
	out := make([]*verifierv1.Criterion, 0, len(p.sections))
	for _, s := range p.sections {
		c := s.c
		c.Description = strings.TrimSpace(strings.Join(s.prose, "\n"))
		lines := map[string]int{"": s.line, "id": s.line, "name": s.line, "description": s.line}
		lines["tag"] = orLine(s.tagLine, s.line)
		lines["related_files"] = orLine(s.filesLine, s.line)
		lines["fix_hint"] = orLine(s.fixLine, s.line)
		if s.tagLine == 0 {
			p.addf(s.line, "criterion %s has no tag: add a line `Tag: AUTO_VERIFY` (or HUMAN_VERIFY, TOOL_VERIFY)", c.Id)
		}
		decoded := true
		switch {
		case s.checkLine != 0 && c.Tag == verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY:
			p.warnf(s.checkLine, c.Id, "HUMAN_VERIFY criterion %s carries a check block: a person decides it, so the block is ignored", c.Id)
		case s.checkLine != 0:
			d := &blockDecoder{offset: s.checkLine, lines: lines}
			decoded = d.decodeBlock(s.checkText, c)
			p.problems = append(p.problems, d.problems...)
		case s.tagLine != 0 && c.Tag != verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY && c.Tag != 0:
			p.addf(s.line, "%s criterion %s has no check: add a ```check block (command, http, file or grpc)", tagName(c.Tag), c.Id)
			decoded = false
		}
		if decoded && s.tagLine != 0 && c.Tag != 0 {
			for _, v := range Validate(c) {
				p.addf(lineOf(lines, v.Field, s.line), "%s", v.String())
			}
		}
		out = append(out, c)
	}
	return out
}

func orLine(line, def int) int {
	if line != 0 {
		return line
	}
	return def
}

// lineOf answers the line of the longest recorded prefix of field path.
func lineOf(lines map[string]int, path string, def int) int {
	for p := path; ; {
		if l, ok := lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			if l, ok := lines[""]; ok {
				return l
			}
			return def
		}
		p = p[:i]
	}
}

// invalidUTF8Line answers the line of the first byte that is not UTF-8.
func invalidUTF8Line(s string) int {
	line := 1
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return line
		}
		if r == '\n' {
			line++
		}
		i += size
	}
	return line
}
