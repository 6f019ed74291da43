package server

import (
	"sync"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/converge-dev/converge/platform/repopath"
)

// The compiled fast path of the repository-path rule. Most path fields of the protos carry the
// same rules: `string = {min_len: 1, max_bytes: 1024}` and the CEL rule "path.relative"
// (pathRuleCEL), whose four regular expressions cost a tenth of the CPU of a lock RPC
// (bench/PROFILE.md). For a field that carries exactly those rules (or a repeated field of such
// items with only min_items, max_items and unique beside), a value that repopath accepts is
// skipped by protovalidate (a Filter): it would pass every rule of the field. Any other value,
// and every other field, is evaluated by protovalidate as before, so a request that breaks a
// rule gets the same violations (the same field paths, rule ids and messages) as without the
// fast path. Only ASCII values take it: there repopath and the CEL rule agree on every
// character class and on the letter case of ".git" without relying on how each folds Unicode
// (TestPathFastPathAgreesWithCEL, FuzzPathFastPath).

// pathRuleCEL is the CEL expression of the "path.relative" rule of the protos' path fields
// (platform/repopath/proto_test.go's pathCEL).
const pathRuleCEL = `this == '' || bytes(this).size() > 1024 || (!this.matches(r'[\\\p{Cc}]') && !this.startsWith('/') && !this.matches('^[A-Za-z]:') && !this.matches(r'(^|/)(|\.|\.\.|(?i:\.git))(/|$)'))`

// pathRuleID is the id of that rule.
const pathRuleID = "path.relative"

// fastKind is what the fast path knows of a field.
type fastKind uint8

const (
	fastNone    fastKind = iota // evaluated by protovalidate
	fastPath                    // a string field with exactly the path rules
	fastList                    // a repeated string field whose items have exactly the path rules (or item's)
	fastString                  // a string field with exactly the rules of a strRule (fastrule.go)
	fastMsgList                 // a repeated message field of fast items (msglist.go)
)

// fastField is a field's fast path, with a list's bounds.
type fastField struct {
	kind               fastKind
	minItems, maxItems uint64
	hasMax, unique     bool
	// str is a fastString field's rules, or a fastList's items' rules (nil: the path rules).
	str *strRule
	// msg is a fastMsgList's items' rules.
	msg *msgRule
}

// fastFields caches the fastField of every field descriptor seen (descriptors live as long as
// the process).
var fastFields sync.Map // protoreflect.FieldDescriptor → fastField

// pathFilter is the protovalidate option of every validation: the fast path.
var pathFilter = protovalidate.WithFilter(protovalidate.FilterFunc(shouldValidate))

// pathOptions is pathFilter as the options of Validate, allocated once.
var pathOptions = []protovalidate.ValidationOption{pathFilter}

// shouldValidate answers false for a path field (or list of paths) whose value passes every
// rule of the field, and true for everything else.
func shouldValidate(msg protoreflect.Message, d protoreflect.Descriptor) bool {
	fd, ok := d.(protoreflect.FieldDescriptor)
	if !ok {
		return true
	}
	f := fastOf(fd)
	switch f.kind {
	case fastPath:
		return !fastValid(msg.Get(fd).String())
	case fastList:
		return !f.listValid(msg.Get(fd).List())
	case fastString:
		return !f.str.ok(msg.Get(fd).String())
	case fastMsgList:
		return !f.msgListValid(msg.Get(fd).List())
	}
	return true
}

// fastOf answers fd's fast path, computing it once.
func fastOf(fd protoreflect.FieldDescriptor) fastField {
	if v, ok := fastFields.Load(fd); ok {
		return v.(fastField)
	}
	f := classify(fd)
	fastFields.Store(fd, f)
	return f
}

// classify answers fd's fast path from its rules: fastNone unless the rules are exactly those
// the fast path checks.
func classify(fd protoreflect.FieldDescriptor) fastField {
	if fd.IsList() && fd.Kind() == protoreflect.MessageKind {
		return classifyMsgList(fd)
	}
	if fd.Kind() != protoreflect.StringKind || fd.IsMap() {
		return fastField{}
	}
	rules, ok := proto.GetExtension(fd.Options(), validatepb.E_Field).(*validatepb.FieldRules)
	if !ok || rules == nil {
		return fastField{}
	}
	if !fd.IsList() && isPathRules(rules) {
		// A member of a oneof (QueryItemsRequest.file_path, an agent's gotcha query per task) or
		// a field with presence takes it too: fastValid refuses "", so an unset field is left to
		// protovalidate, which decides as before whether to look at it at all.
		return fastField{kind: fastPath}
	}
	if fd.ContainingOneof() != nil || fd.HasPresence() {
		return fastField{}
	}
	if !fd.IsList() {
		if r := stringRule(rules); r != nil {
			return fastField{kind: fastString, str: r}
		}
		return fastField{}
	}
	rep := rules.GetRepeated()
	if rep == nil {
		return fastField{}
	}
	var item *strRule
	if !isPathRules(rep.GetItems()) {
		if item = stringRule(rep.GetItems()); item == nil {
			return fastField{}
		}
	}
	// Nothing but the repeated rules beside the items' path rules.
	rest := proto.CloneOf(rules)
	rest.ClearRepeated()
	bounds := proto.CloneOf(rep)
	bounds.ClearItems()
	bounds.ClearMinItems()
	bounds.ClearMaxItems()
	bounds.ClearUnique()
	if !proto.Equal(rest, &validatepb.FieldRules{}) || !proto.Equal(bounds, &validatepb.RepeatedRules{}) {
		return fastField{}
	}
	return fastField{kind: fastList, minItems: rep.GetMinItems(), maxItems: rep.GetMaxItems(), hasMax: rep.HasMaxItems(), unique: rep.GetUnique(), str: item}
}

// isPathRules reports whether rules are exactly `string = {min_len: 1, max_bytes: 1024}` and
// the one CEL rule pathRuleCEL.
func isPathRules(rules *validatepb.FieldRules) bool {
	if rules == nil || len(rules.GetCel()) != 1 {
		return false
	}
	cel := rules.GetCel()[0]
	if cel.GetId() != pathRuleID || cel.GetExpression() != pathRuleCEL {
		return false
	}
	rest := proto.CloneOf(rules)
	rest.SetCel(nil)
	want := &validatepb.FieldRules{}
	want.SetString(validatepb.StringRules_builder{MinLen: proto.Uint64(1), MaxBytes: proto.Uint64(repopath.MaxBytes)}.Build())
	return proto.Equal(rest, want)
}

// fastValid reports whether s passes the path rules: ASCII (see the top of this file) and
// accepted by repopath, which also checks min_len 1 and max_bytes 1024.
func fastValid(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return repopath.Validate(s) == nil
}

// listValid reports whether l passes the list's rules: its bounds, uniqueness and every item's
// path rules.
func (f fastField) listValid(l protoreflect.List) bool {
	n := l.Len()
	if uint64(n) < f.minItems || (f.hasMax && uint64(n) > f.maxItems) {
		return false
	}
	for i := range n {
		s := l.Get(i).String()
		if (f.str == nil && !fastValid(s)) || (f.str != nil && !f.str.ok(s)) {
			return false
		}
		if f.unique && n <= 32 {
			for j := range i {
				if l.Get(j).String() == s {
					return false
				}
			}
		}
	}
	if f.unique && n > 32 {
		seen := make(map[string]struct{}, n)
		for i := range n {
			s := l.Get(i).String()
			if _, dup := seen[s]; dup {
				return false
			}
			seen[s] = struct{}{}
		}
	}
	return true
}
