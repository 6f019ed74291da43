package criteria

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Format writes criteria as a done-criteria markdown document that Parse reads back into the
// same criteria (source lines aside): one `## ID: name` section per criterion with its Tag,
// Files and Fix lines, its description, and its check as a ```check block of YAML.
func Format(title string, criteria []*verifierv1.Criterion) string {
	var b strings.Builder
	if title = strings.TrimSpace(strings.ReplaceAll(title, "\n", " ")); title != "" {
		fmt.Fprintf(&b, "# %s\n", title)
	}
	for _, c := range criteria {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "## %s: %s\n", c.GetId(), c.GetName())
		fmt.Fprintf(&b, "Tag: %s\n", tagName(c.GetTag()))
		if files := c.GetRelatedFiles(); len(files) > 0 {
			writeMetadata(&b, "Files", strings.Join(files, ", "))
		}
		if hint := c.GetFixHint(); hint != "" {
			for _, line := range strings.Split(hint, "\n") {
				writeMetadata(&b, "Fix", line)
			}
		}
		if d := c.GetDescription(); d != "" {
			fmt.Fprintf(&b, "\n%s\n", d)
		}
		if block := FormatCheck(c); block != "" {
			fmt.Fprintf(&b, "\n```check\n%s```\n", block)
		}
	}
	return b.String()
}

// writeMetadata writes a `Key: value` line. A value that starts with emphasis markers is written
// after a bold key (`**Fix:** **x**`), since Parse reads `Fix: **x` as bold around the key.
func writeMetadata(b *strings.Builder, key, value string) {
	if strings.HasPrefix(value, "**") || strings.HasPrefix(value, "__") {
		fmt.Fprintf(b, "**%s:** %s\n", key, value)
		return
	}
	fmt.Fprintf(b, "%s: %s\n", key, value)
}

// FormatCheck renders c's check as the YAML of a check block ("" when c has none).
func FormatCheck(c *verifierv1.Criterion) string {
	m := c.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("check")
	fd := m.WhichOneof(od)
	if fd == nil {
		return ""
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.Content = append(root.Content, str(string(fd.Name())), encodeMessage(m.Get(fd).Message()))
	var out strings.Builder
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		// Only strings, numbers and mappings are encoded; the encoder cannot fail on them.
		panic(fmt.Sprintf("criteria: encode check: %v", err))
	}
	_ = enc.Close()
	return out.String()
}

// tagName is the markdown spelling of a tag, e.g. AUTO_VERIFY.
func tagName(t verifierv1.CriterionTag) string {
	return enumShortName(t.Descriptor(), protoreflect.EnumNumber(t))
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func plain(tag, s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}
}

// encodeMessage renders m's populated fields as a mapping, in field-number order.
func encodeMessage(m protoreflect.Message) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		n.Content = append(n.Content, str(string(fd.Name())), encodeField(fd, m.Get(fd)))
	}
	if len(n.Content) == 0 {
		n.Style = yaml.FlowStyle // {}
	}
	return n
}

func encodeField(fd protoreflect.FieldDescriptor, v protoreflect.Value) *yaml.Node {
	switch {
	case fd.IsMap():
		n := &yaml.Node{Kind: yaml.MappingNode}
		var keys []string
		v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k.String())
			return true
		})
		sort.Strings(keys)
		for _, k := range keys {
			n.Content = append(n.Content, str(k), encodeScalar(fd.MapValue(), v.Map().Get(protoreflect.ValueOfString(k).MapKey())))
		}
		return n
	case fd.IsList():
		n := &yaml.Node{Kind: yaml.SequenceNode}
		list := v.List()
		for i := range list.Len() {
			if fd.Kind() == protoreflect.MessageKind {
				n.Content = append(n.Content, encodeMessage(list.Get(i).Message()))
			} else {
				n.Content = append(n.Content, encodeScalar(fd, list.Get(i)))
			}
		}
		return n
	case fd.Kind() == protoreflect.MessageKind:
		if isDuration(fd.Message()) {
			d := &durationpb.Duration{
				Seconds: v.Message().Get(fd.Message().Fields().ByName("seconds")).Int(),
				Nanos:   int32(v.Message().Get(fd.Message().Fields().ByName("nanos")).Int()),
			}
			return str(d.AsDuration().String())
		}
		return encodeMessage(v.Message())
	default:
		return encodeScalar(fd, v)
	}
}

func encodeScalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) *yaml.Node {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return str(v.String())
	case protoreflect.BoolKind:
		return plain("!!bool", strconv.FormatBool(v.Bool()))
	case protoreflect.EnumKind:
		return str(enumShortName(fd.Enum(), v.Enum()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return plain("!!int", strconv.FormatInt(v.Int(), 10))
	default:
		return str(v.String())
	}
}
