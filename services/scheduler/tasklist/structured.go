package tasklist

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// ParseJSON reads a TaskListSpec in protobuf JSON (lowerCamelCase or original field names).
// Unknown fields are errors. Errors name the line.
func ParseJSON(content []byte) (*Document, error) {
	if err := checkUTF8(content); err != nil {
		return nil, err
	}
	spec := &schedulerv1.TaskListSpec{}
	if err := protojson.Unmarshal(content, spec); err != nil {
		return nil, protojsonError(err, func(line int) int { return line }, lineCount(content))
	}
	return &Document{Spec: spec, TaskLines: jsonTaskLines(content, len(spec.GetTasks()))}, nil
}

// protojsonPos finds the "(line L:C)" position protojson puts in its errors.
var protojsonPos = regexp.MustCompile(`\(line (\d+):\d+\):?\s*`)

// protojsonError turns a protojson error into a ParseError on the line mapLine gives for the
// JSON line it names; an error without a position (an early end) is put on lastLine.
func protojsonError(err error, mapLine func(int) int, lastLine int) *ParseError {
	// protojson randomly uses a non-breaking space after "proto:" so that nobody matches its
	// messages exactly; the position is stable.
	msg := strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
	line := lastLine
	if m := protojsonPos.FindStringSubmatchIndex(msg); m != nil {
		n, _ := strconv.Atoi(msg[m[2]:m[3]])
		line = mapLine(n)
		msg = msg[:m[0]] + msg[m[1]:]
	}
	msg = strings.TrimSpace(msg)
	if line < 1 {
		line = 1
	}
	return &ParseError{Line: line, Msg: msg}
}

// jsonTaskLines finds the line each element of the top-level "tasks" array starts on, in a
// document protojson accepted. It gives up (zeros) on anything unexpected.
func jsonTaskLines(content []byte, n int) []int {
	lines := make([]int, n)
	dec := json.NewDecoder(bytes.NewReader(content))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return lines
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return lines
		}
		if key != "tasks" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return lines
			}
			continue
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return lines // null
		}
		for i := 0; dec.More() && i < n; i++ {
			// The element starts at the first byte after the last token that is not a space or
			// a comma.
			off := int(dec.InputOffset())
			for off < len(content) && strings.IndexByte(" \t\r\n,", content[off]) >= 0 {
				off++
			}
			lines[i] = 1 + bytes.Count(content[:off], []byte("\n"))
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return lines
			}
		}
		return lines
	}
	return lines
}

// ParseYAML reads a TaskListSpec in YAML, the same shape as the JSON form. The YAML is converted
// to protobuf JSON guided by the message's fields, so a plain scalar given to a string field is
// taken as written ("id: 1.10" is the id "1.10", not the number 1.1), and durations may be written
// as Go writes them ("2m") besides protobuf JSON's "120s". Unknown and repeated keys are errors.
// Errors name the YAML line.
func ParseYAML(content []byte) (*Document, error) {
	if err := checkUTF8(content); err != nil {
		return nil, err
	}
	doc, err := parseYAML(content)
	if err != nil {
		// YAML also ends lines with a lone "\r"; name the line as the rest of the world counts
		// them, by "\n".
		var perr *ParseError
		if errors.As(err, &perr) {
			perr.Line = yamlToTextLine(content, perr.Line)
		}
		return nil, err
	}
	for i, l := range doc.TaskLines {
		doc.TaskLines[i] = yamlToTextLine(content, l)
	}
	return doc, nil
}

// yamlToTextLine turns a YAML line number (lines end with "\r\n", "\r" or "\n") into the
// number of the "\n"-ended line it is on.
func yamlToTextLine(content []byte, yamlLine int) int {
	if yamlLine <= 1 || !bytes.Contains(content, []byte("\r")) {
		return yamlLine
	}
	y, text := 1, 1
	for i := 0; i < len(content) && y < yamlLine; i++ {
		switch content[i] {
		case '\n':
			y++
			text++
		case '\r':
			if i+1 < len(content) && content[i+1] == '\n' {
				continue // counted at the \n
			}
			y++
		}
	}
	return text
}

func parseYAML(content []byte) (*Document, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(content))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errorf(1, "the document is empty")
		}
		return nil, yamlError(err, lineCount(content))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, errorf(max(extra.Line, 1), "only one YAML document is allowed")
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(err, lineCount(content))
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}

	c := &yamlConverter{}
	md := (&schedulerv1.TaskListSpec{}).ProtoReflect().Descriptor()
	if err := c.message(doc, md); err != nil {
		return nil, err
	}
	spec := &schedulerv1.TaskListSpec{}
	if err := protojson.Unmarshal(c.out.Bytes(), spec); err != nil {
		return nil, protojsonError(err, func(line int) int {
			if line >= 1 && line <= len(c.lines) {
				return c.lines[line-1]
			}
			return 0
		}, lineCount(content))
	}
	lines := make([]int, len(spec.GetTasks()))
	copy(lines, c.taskLines)
	return &Document{Spec: spec, TaskLines: lines}, nil
}

// yamlLinePrefix finds the line yaml.v3 names in its errors ("yaml: line 3: ...").
var yamlLinePrefix = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

func yamlError(err error, lastLine int) *ParseError {
	msg := err.Error()
	line := lastLine
	if m := yamlLinePrefix.FindStringSubmatch(msg); m != nil {
		if m[1] != "" {
			line, _ = strconv.Atoi(m[1])
		}
		msg = msg[len(m[0]):]
	}
	return &ParseError{Line: max(line, 1), Msg: msg}
}

// Limits of the YAML conversion: aliases may make a small document expand enormously.
const (
	maxYAMLNodes = 1 << 20
	maxYAMLDepth = 64
)

// yamlConverter writes protobuf JSON for a YAML tree, one token per line, and remembers the YAML
// line of each JSON line so that protojson's errors can name the YAML line.
type yamlConverter struct {
	out       bytes.Buffer
	lines     []int // YAML line of each JSON line written so far
	nodes     int
	depth     int
	taskLines []int // YAML line of each element of the top-level tasks
}

// emit writes one JSON line for the YAML line.
func (c *yamlConverter) emit(line int, s string) {
	c.out.WriteString(s)
	c.out.WriteByte('\n')
	c.lines = append(c.lines, line)
}

// enter accounts for one more node (following aliases) and one more level of nesting.
func (c *yamlConverter) enter(n *yaml.Node) (*yaml.Node, error) {
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil, errorf(max(n.Line, 1), "unknown alias")
		}
		n = n.Alias
	}
	c.nodes++
	c.depth++
	if c.nodes > maxYAMLNodes {
		return nil, errorf(max(n.Line, 1), "the document expands to more than %d nodes (aliases?)", maxYAMLNodes)
	}
	if c.depth > maxYAMLDepth {
		return nil, errorf(max(n.Line, 1), "the document nests deeper than %d levels", maxYAMLDepth)
	}
	return n, nil
}

func (c *yamlConverter) leave() { c.depth-- }

// message converts a mapping to the JSON object of message md.
func (c *yamlConverter) message(n *yaml.Node, md protoreflect.MessageDescriptor) error {
	n, err := c.enter(n)
	if err != nil {
		return err
	}
	defer c.leave()
	if isNull(n) {
		c.emit(n.Line, "null")
		return nil
	}
	if md.FullName() == "google.protobuf.Duration" && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		// Durations as Go writes them ("2m", "1h30m") as well as protobuf JSON's "120s".
		if d, err := time.ParseDuration(n.Value); err == nil {
			out, err := protojson.Marshal(durationpb.New(d))
			if err == nil {
				c.emit(n.Line, string(out))
				return nil
			}
		}
	}
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return c.generic(n) // well-known types have their own JSON forms; protojson checks them
	}
	if n.Kind != yaml.MappingNode {
		return errorf(n.Line, "%s must be a mapping, not %s", md.Name(), kindName(n))
	}
	c.emit(n.Line, "{")
	seen := map[protoreflect.FieldNumber]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return errorf(k.Line, "keys of %s must be field names", md.Name())
		}
		if k.Value == "<<" {
			return errorf(k.Line, "merge keys (<<) are not supported")
		}
		fd := md.Fields().ByJSONName(k.Value)
		if fd == nil {
			fd = md.Fields().ByTextName(k.Value)
		}
		if fd == nil {
			return errorf(k.Line, "unknown field %q in %s", k.Value, md.Name())
		}
		if first, dup := seen[fd.Number()]; dup {
			return errorf(k.Line, "field %q is given twice (first on line %d)", k.Value, first)
		}
		seen[fd.Number()] = k.Line
		sep := ","
		if i == 0 {
			sep = ""
		}
		c.emit(k.Line, sep+strconv.Quote(fd.JSONName())+":")
		if err := c.field(v, fd, md.FullName() == "converge.scheduler.v1.TaskListSpec" && fd.Name() == "tasks"); err != nil {
			return err
		}
	}
	c.emit(n.Line, "}")
	return nil
}

// field converts the value of field fd.
func (c *yamlConverter) field(n *yaml.Node, fd protoreflect.FieldDescriptor, topTasks bool) error {
	switch {
	case fd.IsList():
		n, err := c.enter(n)
		if err != nil {
			return err
		}
		defer c.leave()
		if isNull(n) {
			c.emit(n.Line, "null")
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return errorf(n.Line, "field %q must be a list, not %s", fd.JSONName(), kindName(n))
		}
		c.emit(n.Line, "[")
		for i, item := range n.Content {
			if i > 0 {
				c.emit(item.Line, ",")
			}
			if topTasks {
				c.taskLines = append(c.taskLines, item.Line)
			}
			if err := c.single(item, fd, fd.Kind()); err != nil {
				return err
			}
		}
		c.emit(n.Line, "]")
		return nil
	case fd.IsMap():
		n, err := c.enter(n)
		if err != nil {
			return err
		}
		defer c.leave()
		if isNull(n) {
			c.emit(n.Line, "null")
			return nil
		}
		if n.Kind != yaml.MappingNode {
			return errorf(n.Line, "field %q must be a mapping, not %s", fd.JSONName(), kindName(n))
		}
		c.emit(n.Line, "{")
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return errorf(k.Line, "keys of %q must be scalars", fd.JSONName())
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			c.emit(k.Line, sep+strconv.Quote(k.Value)+":")
			if err := c.single(v, fd.MapValue(), fd.MapValue().Kind()); err != nil {
				return err
			}
		}
		c.emit(n.Line, "}")
		return nil
	default:
		return c.single(n, fd, fd.Kind())
	}
}

// single converts one value of a field of kind k.
func (c *yamlConverter) single(n *yaml.Node, fd protoreflect.FieldDescriptor, k protoreflect.Kind) error {
	if k == protoreflect.MessageKind || k == protoreflect.GroupKind {
		return c.message(n, fd.Message())
	}
	n, err := c.enter(n)
	if err != nil {
		return err
	}
	defer c.leave()
	if isNull(n) {
		c.emit(n.Line, "null")
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return errorf(n.Line, "field %q must be a single value, not %s", fd.JSONName(), kindName(n))
	}
	tag := n.ShortTag()
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind:
		c.emit(n.Line, strconv.Quote(n.Value))
	case protoreflect.BoolKind:
		var b bool
		if tag != "!!bool" || n.Decode(&b) != nil {
			return errorf(n.Line, "field %q must be true or false, not %q", fd.JSONName(), n.Value)
		}
		c.emit(n.Line, strconv.FormatBool(b))
	case protoreflect.EnumKind:
		c.emit(n.Line, c.number(n, tag))
	default: // integers and floating point; protojson checks the range
		c.emit(n.Line, c.number(n, tag))
	}
	return nil
}

// number writes a scalar as a JSON number when YAML reads it as one, else as a JSON string
// (protojson accepts numbers in strings, enum names, and says what is wrong otherwise).
func (c *yamlConverter) number(n *yaml.Node, tag string) string {
	switch tag {
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return strconv.FormatInt(i, 10)
		}
		var u uint64
		if n.Decode(&u) == nil {
			return strconv.FormatUint(u, 10)
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			switch {
			case math.IsNaN(f):
				return `"NaN"`
			case math.IsInf(f, 1):
				return `"Infinity"`
			case math.IsInf(f, -1):
				return `"-Infinity"`
			}
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	return strconv.Quote(n.Value)
}

// generic converts any YAML value to JSON by its YAML types (for well-known types).
func (c *yamlConverter) generic(n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		c.emit(n.Line, "{")
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return errorf(k.Line, "keys must be scalars")
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			c.emit(k.Line, sep+strconv.Quote(k.Value)+":")
			v, err := c.enter(n.Content[i+1])
			if err != nil {
				return err
			}
			err = c.generic(v)
			c.leave()
			if err != nil {
				return err
			}
		}
		c.emit(n.Line, "}")
	case yaml.SequenceNode:
		c.emit(n.Line, "[")
		for i, item := range n.Content {
			if i > 0 {
				c.emit(item.Line, ",")
			}
			v, err := c.enter(item)
			if err != nil {
				return err
			}
			err = c.generic(v)
			c.leave()
			if err != nil {
				return err
			}
		}
		c.emit(n.Line, "]")
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); {
		case isNull(n):
			c.emit(n.Line, "null")
		case tag == "!!bool":
			var b bool
			if n.Decode(&b) != nil {
				return errorf(n.Line, "%q is not a boolean", n.Value)
			}
			c.emit(n.Line, strconv.FormatBool(b))
		case tag == "!!int" || tag == "!!float":
			c.emit(n.Line, c.number(n, tag))
		default:
			c.emit(n.Line, strconv.Quote(n.Value))
		}
	default:
		return errorf(max(n.Line, 1), "unexpected %s", kindName(n))
	}
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	case yaml.DocumentNode:
		return "a document"
	default:
		return "an alias"
	}
}

// checkUTF8 refuses content that is not UTF-8, naming the first bad line.
func checkUTF8(content []byte) error {
	if utf8.Valid(content) {
		return nil
	}
	line := 1
	for len(content) > 0 {
		r, size := utf8.DecodeRune(content)
		if r == utf8.RuneError && size <= 1 {
			return errorf(line, "the document is not valid UTF-8")
		}
		if r == '\n' {
			line++
		}
		content = content[size:]
	}
	return errorf(line, "the document is not valid UTF-8")
}

// lineCount is the number of the last line of content (1 for an empty document).
func lineCount(content []byte) int {
	n := 1 + bytes.Count(content, []byte("\n"))
	if len(content) > 0 && content[len(content)-1] == '\n' {
		n--
	}
	return max(n, 1)
}
