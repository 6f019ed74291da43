package server

import (
	"regexp"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The fast path of a list of small messages (ReleaseLocksRequest.locks: a task's grants). Such a
// field's rule "each item's F at most once" is a CEL comprehension, `this.map(x, x.F).unique()`,
// which protovalidate evaluates by reflection at about a dozen allocations per item: a sixth of
// the CPU of a batch of 8 locks (bench/PROFILE.md). A protovalidate Filter that answers false
// for a field skips every rule under it, the items' own included, so the fast path checks them
// all: a list field whose rules are exactly min_items, max_items and at most that one CEL rule,
// of items whose message has no rule of its own and whose every field is a fast path field
// (pathrule.go, fastrule.go) or an int64 with exactly a `gt` rule. A list that passes every one
// of those rules is skipped; any other list is evaluated by protovalidate as before, so a bad
// request gets the same violations (TestMsgListFastPathAgreesWithCEL).

// uniqueByCEL matches the CEL rule `this.map(x, x.F).unique()` (x twice, F a field).
var uniqueByCEL = regexp.MustCompile(`^this\.map\(([a-z_]+), ([a-z_]+)\.([a-z_]+)\)\.unique\(\)$`)

// msgRule is a fastMsgList field's items' rules.
type msgRule struct {
	uniqueBy protoreflect.FieldDescriptor // a string field of the items, at most once each; nil: none
	fields   []msgItemField
}

// msgItemField is a field of the items and its rule: a fast string or path field, or an int64
// greater than gt.
type msgItemField struct {
	fd  protoreflect.FieldDescriptor
	str fastField // kind fastPath or fastString; fastNone: the int64 rule
	gt  int64
}

// classifyMsgList answers fd's fast path when fd is a list of messages with exactly the rules
// the fast path checks, and fastNone otherwise.
func classifyMsgList(fd protoreflect.FieldDescriptor) fastField {
	rules, ok := proto.GetExtension(fd.Options(), validatepb.E_Field).(*validatepb.FieldRules)
	if !ok || rules == nil || rules.GetRepeated() == nil || len(rules.GetCel()) > 1 {
		return fastField{}
	}
	md := fd.Message()
	rule := &msgRule{}
	if len(rules.GetCel()) == 1 {
		m := uniqueByCEL.FindStringSubmatch(rules.GetCel()[0].GetExpression())
		if m == nil || m[1] != m[2] {
			return fastField{}
		}
		by := md.Fields().ByName(protoreflect.Name(m[3]))
		if by == nil || by.Kind() != protoreflect.StringKind || by.IsList() || by.IsMap() {
			return fastField{}
		}
		rule.uniqueBy = by
	}
	rep := rules.GetRepeated()
	rest := proto.CloneOf(rules)
	rest.ClearRepeated()
	rest.SetCel(nil)
	bounds := proto.CloneOf(rep)
	bounds.ClearMinItems()
	bounds.ClearMaxItems()
	if !proto.Equal(rest, &validatepb.FieldRules{}) || !proto.Equal(bounds, &validatepb.RepeatedRules{}) {
		return fastField{}
	}
	if mr, ok := proto.GetExtension(md.Options(), validatepb.E_Message).(*validatepb.MessageRules); (ok && mr != nil && !proto.Equal(mr, &validatepb.MessageRules{})) || md.Oneofs().Len() != 0 {
		return fastField{}
	}
	for i := range md.Fields().Len() {
		f, ok := classifyItemField(md.Fields().Get(i))
		if !ok {
			return fastField{}
		}
		rule.fields = append(rule.fields, f)
	}
	return fastField{kind: fastMsgList, minItems: rep.GetMinItems(), maxItems: rep.GetMaxItems(), hasMax: rep.HasMaxItems(), msg: rule}
}

// classifyItemField answers the fast rule of a field of a fastMsgList's items, or false.
func classifyItemField(fd protoreflect.FieldDescriptor) (msgItemField, bool) {
	if fd.IsList() || fd.IsMap() || fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		return msgItemField{}, false // and no recursion into a message that holds itself
	}
	if f := classify(fd); f.kind == fastPath || f.kind == fastString {
		return msgItemField{fd: fd, str: f}, true
	}
	if fd.Kind() != protoreflect.Int64Kind || fd.IsList() || fd.HasPresence() || fd.ContainingOneof() != nil {
		return msgItemField{}, false
	}
	rules, ok := proto.GetExtension(fd.Options(), validatepb.E_Field).(*validatepb.FieldRules)
	if !ok || rules == nil || !rules.GetInt64().HasGt() {
		return msgItemField{}, false
	}
	want := &validatepb.FieldRules{}
	want.SetInt64(validatepb.Int64Rules_builder{Gt: proto.Int64(rules.GetInt64().GetGt())}.Build())
	if !proto.Equal(rules, want) {
		return msgItemField{}, false
	}
	return msgItemField{fd: fd, gt: rules.GetInt64().GetGt()}, true
}

// msgListValid reports whether l passes the list's rules: its bounds, every item's fields and
// the uniqueness of the items' uniqueBy field.
func (f fastField) msgListValid(l protoreflect.List) bool {
	n := l.Len()
	if uint64(n) < f.minItems || (f.hasMax && uint64(n) > f.maxItems) {
		return false
	}
	for i := range n {
		item := l.Get(i).Message()
		for _, fl := range f.msg.fields {
			if !fl.ok(item.Get(fl.fd)) {
				return false
			}
		}
	}
	by := f.msg.uniqueBy
	if by == nil {
		return true
	}
	if n <= 32 {
		for i := range n {
			s := l.Get(i).Message().Get(by).String()
			for j := range i {
				if l.Get(j).Message().Get(by).String() == s {
					return false
				}
			}
		}
		return true
	}
	seen := make(map[string]struct{}, n)
	for i := range n {
		s := l.Get(i).Message().Get(by).String()
		if _, dup := seen[s]; dup {
			return false
		}
		seen[s] = struct{}{}
	}
	return true
}

// ok reports whether v passes the field's rule.
func (f msgItemField) ok(v protoreflect.Value) bool {
	switch f.str.kind {
	case fastPath:
		return fastValid(v.String())
	case fastString:
		return f.str.str.ok(v.String())
	}
	return v.Int() > f.gt
}
