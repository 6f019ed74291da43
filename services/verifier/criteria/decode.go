package criteria

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// This file decodes the YAML (or JSON, which is YAML) of a ```check block into the check of a
// Criterion, walking the proto descriptors so that every key and value is checked against the
// contract and every problem names its line. Keys are the proto field names (snake_case; the
// lowerCamelCase JSON names are accepted too), so the markdown format and the structured
// CriteriaSet are the same thing in two spellings.

// maxDepth bounds the nesting of a check block (the deepest real path is about 6 levels).
const maxDepth = 16

// checkKinds are the top-level keys of a check block, in the order the docs list them.
var checkKinds = []string{"command", "http", "file", "grpc"}

// blockDecoder decodes one check block. Problems and the line of every decoded field are
// recorded for mapping validation errors back to the document.
type blockDecoder struct {
	// offset is added to the 1-based line numbers of the YAML to get document lines: the line
	// of the opening fence.
	offset int
	// lines maps field paths (protovalidate's notation, relative to the Criterion, e.g.
	// "http.expect.body.matches[0]") to document lines.
	lines map[string]int
	// problems found, in order.
	problems []Problem
}

func (d *blockDecoder) addf(line int, format string, args ...any) {
	d.problems = append(d.problems, Problem{Line: line, Message: fmt.Sprintf(format, args...)})
}

// line answers the document line of a YAML node.
func (d *blockDecoder) line(n *yaml.Node) int {
	if n == nil || n.Line == 0 {
		return d.offset
	}
	return d.offset + n.Line
}

// yamlLine matches the line yaml.v3 puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decodeBlock decodes the text of a check block into c's check. It reports false when it
// found problems.
func (d *blockDecoder) decodeBlock(text string, c *verifierv1.Criterion) (ok bool) {
	before := len(d.problems)
	root, err := parseYAML(text)
	if err != nil {
		msg, line := err.Error(), d.offset
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			if n, convErr := strconv.Atoi(m[1]); convErr == nil {
				line, msg = d.offset+n, m[2]
			}
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		d.addf(line, "check block is not valid YAML: %s", msg)
		return false
	}
	if root == nil {
		d.addf(d.offset, "check block is empty: want one of %s with its settings", strings.Join(checkKinds, ", "))
		return false
	}
	root = resolveAlias(root)
	if root.Kind != yaml.MappingNode {
		d.addf(d.line(root), "check block must be a mapping with one key, the check kind (%s)", strings.Join(checkKinds, ", "))
		return false
	}
	if len(root.Content) == 0 {
		d.addf(d.line(root), "check block is empty: want one of %s with its settings", strings.Join(checkKinds, ", "))
		return false
	}
	var kind string
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		name := key.Value
		if !isKind(name) {
			d.addf(d.line(key), "unknown check kind %q (want command, http, file or grpc)", name)
			continue
		}
		if kind != "" {
			d.addf(d.line(key), "one check per criterion: %s and %s given (split them into two criteria)", kind, name)
			continue
		}
		kind = name
		d.lines[name] = d.line(key)
		m := c.ProtoReflect()
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		msg := m.NewField(fd).Message()
		d.decodeMessage(msg, val, name, 1)
		m.Set(fd, protoreflect.ValueOfMessage(msg))
	}
	return len(d.problems) == before
}

// parseYAML parses text as exactly one YAML document and answers its root node (nil for an
// empty document). yaml.v3 is defensive, but a parser is what fuzzing finds panics in: a panic
// here is turned into an error, never a crash of the server.
func parseYAML(text string) (root *yaml.Node, err error) {
	defer func() {
		if p := recover(); p != nil {
			root, err = nil, fmt.Errorf("yaml: cannot parse: %v", p)
		}
	}()
	dec := yaml.NewDecoder(strings.NewReader(text))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("yaml: line %d: a check block holds one YAML document, found a second one", extra.Line)
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

func isKind(name string) bool {
	for _, k := range checkKinds {
		if k == name {
			return true
		}
	}
	return false
}

// resolveAlias follows YAML aliases (*anchor) to the node they name.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is YAML null (`~`, `null` or nothing).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// decodeMessage decodes the mapping n into m; path is m's field path.
func (d *blockDecoder) decodeMessage(m protoreflect.Message, n *yaml.Node, path string, depth int) {
	n = resolveAlias(n)
	if n == nil || isNull(n) {
		return // `health:` with nothing after it: an empty message
	}
	if depth > maxDepth {
		d.addf(d.line(n), "%s: nested too deeply", path)
		return
	}
	desc := m.Descriptor()
	if isDuration(desc) {
		d.addf(d.line(n), "%s: want a duration such as 500ms, 30s or 2m", path)
		return
	}
	if n.Kind != yaml.MappingNode {
		d.addf(d.line(n), "%s: want a mapping of %s", path, knownKeys(desc))
		return
	}
	seen := map[string]int{}
	oneofs := map[protoreflect.FullName]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := resolveAlias(n.Content[i]), n.Content[i+1]
		fd := fieldByKey(desc, key.Value)
		if fd == nil {
			d.addf(d.line(key), "%s: unknown key %q (known: %s)", path, key.Value, knownKeys(desc))
			continue
		}
		name := string(fd.Name())
		if first, dup := seen[name]; dup {
			d.addf(d.line(key), "%s: key %q given twice (first at line %d)", path, name, first)
			continue
		}
		seen[name] = d.line(key)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if other, set := oneofs[od.FullName()]; set {
				d.addf(d.line(key), "%s: %s and %s are exclusive: give one of %s", path, other, name, oneofMembers(od))
				continue
			}
			oneofs[od.FullName()] = name
		}
		fpath := path + "." + name
		d.lines[fpath] = d.line(key)
		d.decodeField(m, fd, val, fpath, depth)
	}
}

// decodeField decodes n into field fd of m.
func (d *blockDecoder) decodeField(m protoreflect.Message, fd protoreflect.FieldDescriptor, n *yaml.Node, path string, depth int) {
	n = resolveAlias(n)
	switch {
	case fd.IsMap():
		if isNull(n) {
			return
		}
		if n.Kind != yaml.MappingNode {
			d.addf(d.line(n), "%s: want a mapping of name: value", path)
			return
		}
		mp := m.Mutable(fd).Map()
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := resolveAlias(n.Content[i]), resolveAlias(n.Content[i+1])
			kpath := fmt.Sprintf("%s[%q]", path, key.Value)
			if first, dup := seen[key.Value]; dup {
				d.addf(d.line(key), "%s: key %q given twice (first at line %d)", path, key.Value, first)
				continue
			}
			seen[key.Value] = d.line(key)
			d.lines[kpath] = d.line(key)
			if key.Kind != yaml.ScalarNode {
				d.addf(d.line(key), "%s: keys must be plain text", path)
				continue
			}
			v, ok := d.scalar(fd.MapValue(), val, kpath)
			if ok {
				mp.Set(protoreflect.ValueOfString(key.Value).MapKey(), v)
			}
		}
	case fd.IsList():
		if isNull(n) {
			return
		}
		items := []*yaml.Node{n}
		if n.Kind == yaml.SequenceNode {
			items = n.Content
		}
		list := m.Mutable(fd).List()
		for i, item := range items {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			d.lines[ipath] = d.line(item)
			if fd.Kind() == protoreflect.MessageKind {
				elem := list.NewElement()
				d.decodeMessage(elem.Message(), item, ipath, depth+1)
				list.Append(elem)
				continue
			}
			if v, ok := d.scalar(fd, resolveAlias(item), ipath); ok {
				list.Append(v)
			}
		}
	case fd.Kind() == protoreflect.MessageKind:
		if isDuration(fd.Message()) {
			if isNull(n) {
				return
			}
			if dur, ok := d.duration(n, path); ok {
				m.Set(fd, protoreflect.ValueOfMessage(durationpb.New(dur).ProtoReflect()))
			}
			return
		}
		msg := m.Mutable(fd).Message()
		d.decodeMessage(msg, n, path, depth+1)
	default:
		if isNull(n) {
			return
		}
		if v, ok := d.scalar(fd, n, path); ok {
			m.Set(fd, v)
		}
	}
}

// scalar decodes a scalar node for a field of fd's kind.
func (d *blockDecoder) scalar(fd protoreflect.FieldDescriptor, n *yaml.Node, path string) (protoreflect.Value, bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		d.addf(d.line(n), "%s: want a single value, not a %s", path, nodeKind(n))
		return protoreflect.Value{}, false
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		if isNull(n) {
			d.addf(d.line(n), "%s: want a text, not null", path)
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfString(n.Value), true
	case protoreflect.BoolKind:
		switch strings.ToLower(n.Value) {
		case "true":
			return protoreflect.ValueOfBool(true), true
		case "false":
			return protoreflect.ValueOfBool(false), true
		}
		d.addf(d.line(n), "%s: want true or false, not %q", path, n.Value)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		v, err := strconv.ParseInt(n.Value, 10, 32)
		if err == nil {
			return protoreflect.ValueOfInt32(int32(v)), true
		}
		d.addf(d.line(n), "%s: want a whole number, not %q", path, n.Value)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err == nil {
			return protoreflect.ValueOfInt64(v), true
		}
		d.addf(d.line(n), "%s: want a whole number, not %q", path, n.Value)
	case protoreflect.EnumKind:
		if v, ok := enumValue(fd.Enum(), n.Value); ok {
			return protoreflect.ValueOfEnum(v), true
		}
		d.addf(d.line(n), "%s: unknown value %q (want %s)", path, n.Value, enumNames(fd.Enum()))
	default:
		d.addf(d.line(n), "%s: unsupported field kind %s", path, fd.Kind())
	}
	return protoreflect.Value{}, false
}

// duration decodes a Go duration ("500ms", "1m30s") or a number of seconds.
func (d *blockDecoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode {
		d.addf(d.line(n), "%s: want a duration such as 500ms, 30s or 2m", path)
		return 0, false
	}
	if dur, err := time.ParseDuration(n.Value); err == nil {
		return dur, true
	}
	if secs, err := strconv.ParseFloat(n.Value, 64); err == nil && secs >= -1e6 && secs <= 1e6 {
		return time.Duration(secs * float64(time.Second)), true
	}
	d.addf(d.line(n), "%s: %q is not a duration (want e.g. 500ms, 30s or 2m)", path, n.Value)
	return 0, false
}

func nodeKind(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "value"
	}
}

func isDuration(md protoreflect.MessageDescriptor) bool {
	return md.FullName() == "google.protobuf.Duration"
}

// fieldByKey finds the field a YAML key names: its proto name or its JSON name.
func fieldByKey(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	if fd := fields.ByName(protoreflect.Name(key)); fd != nil {
		return fd
	}
	return fields.ByJSONName(key)
}

func knownKeys(md protoreflect.MessageDescriptor) string {
	fields := md.Fields()
	names := make([]string, fields.Len())
	for i := range fields.Len() {
		names[i] = string(fields.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

func oneofMembers(od protoreflect.OneofDescriptor) string {
	fields := od.Fields()
	names := make([]string, fields.Len())
	for i := range fields.Len() {
		names[i] = string(fields.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// enumPrefix is the prefix every value of ed shares, e.g. "FILE_PRESENCE_".
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	var b strings.Builder
	for i, r := range string(ed.Name()) {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String()) + "_"
}

// enumValue finds the value named s: the short name ("ABSENT", any case) or the full one.
func enumValue(ed protoreflect.EnumDescriptor, s string) (protoreflect.EnumNumber, bool) {
	want := strings.ToUpper(strings.TrimSpace(s))
	prefix := enumPrefix(ed)
	values := ed.Values()
	for i := range values.Len() {
		v := values.Get(i)
		if v.Number() == 0 {
			continue // UNSPECIFIED is the absence of a value, never written
		}
		name := string(v.Name())
		if want == name || prefix+want == name {
			return v.Number(), true
		}
	}
	return 0, false
}

// enumShortName is the name of n without the enum's prefix, e.g. "ABSENT".
func enumShortName(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	v := ed.Values().ByNumber(n)
	if v == nil {
		return strconv.Itoa(int(n))
	}
	return strings.TrimPrefix(string(v.Name()), enumPrefix(ed))
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	values := ed.Values()
	var names []string
	for i := range values.Len() {
		if v := values.Get(i); v.Number() != 0 {
			names = append(names, enumShortName(ed, v.Number()))
		}
	}
	return strings.Join(names, ", ")
}
