package store

import (
	"bytes"
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Every transaction of an execution reads its row and most write it back (PutExecution), so the
// detail JSON of the same execution was protojson-decoded and re-encoded on every claim, report and
// completion, although it rarely changes (options, repository, verification, sign-offs). The memo
// keeps, per execution, the last detail text and the message it decodes to:
//
//   - a read whose detail text is the memo's is a clone of the memo's message, no decoding. The
//     text itself is the key, so a write by another process or replica (a different text) is a
//     miss, and the memo is never the truth: the row is read in the transaction as before, the
//     memo only saves decoding the same bytes again. A crash loses nothing it does not rebuild.
//   - a write whose detail (the fields not in columns) equals the memo's message reuses the memo's
//     text, when that text is this process's own protojson encoding of the message: the bytes
//     written are the bytes protojson would have produced.
//   - a database that keeps the detail in its own form answers another text than the one written:
//     Postgres's jsonb prints `{"a": 1, "b": 2}` (its own key order and spacing) for protojson's
//     `{"a":1,"b":2}`. A read whose text decodes to the memo's message keeps that text as the
//     entry's alias, so the next read of it is a clone and the next write of the unchanged detail
//     still reuses the memo's own encoding. Without it, every transaction on Postgres decoded
//     the text its previous one wrote and encoded the detail again (≈ 8 % of the Scheduler's CPU
//     on the P1 fan-out).
var execDetails = newDetailMemo[*schedulerv1.Execution]()

// assignmentDetails is the same memo for assignments' detail JSON (by assignment id): a claim, a
// report and a completion each read and write the assignment's row.
var assignmentDetails = newDetailMemo[*schedulerv1.Assignment]()

// detailMemoSize bounds a memo: the executions (assignments) in flight at once, with room to
// spare.
const detailMemoSize = 256

type detailMemo[M proto.Message] struct {
	mu sync.Mutex
	m  map[string]detailEntry[M] // by the row's id
}

type detailEntry[M proto.Message] struct {
	text   string
	detail M    // text decoded; never handed out (callers get clones)
	ours   bool // text is protojson.Marshal(detail) in this process
	// alias is another text read that decodes to detail (the database's form of text); "" none.
	alias string
}

func newDetailMemo[M proto.Message]() *detailMemo[M] {
	return &detailMemo[M]{m: map[string]detailEntry[M]{}}
}

func (d *detailMemo[M]) put(id string, e detailEntry[M]) {
	if _, ok := d.m[id]; !ok && len(d.m) >= detailMemoSize {
		for k := range d.m { // evict any one
			delete(d.m, k)
			break
		}
	}
	d.m[id] = e
}

// decode is the message that detail text decodes to (a new message the caller owns).
func (d *detailMemo[M]) decode(id, text string) (M, error) {
	if id == "" {
		return decodeDetail[M](text)
	}
	d.mu.Lock()
	if e, ok := d.m[id]; ok && (e.text == text || (e.alias != "" && e.alias == text)) {
		c := proto.CloneOf(e.detail)
		d.mu.Unlock()
		return c, nil
	}
	d.mu.Unlock()
	e, err := decodeDetail[M](text)
	if err != nil {
		return e, err
	}
	d.mu.Lock()
	if old, ok := d.m[id]; ok && proto.Equal(old.detail, e) {
		old.alias = text // the same detail in the database's form
		d.m[id] = old
	} else {
		d.put(id, detailEntry[M]{text: text, detail: proto.CloneOf(e)})
	}
	d.mu.Unlock()
	return e, nil
}

// encodeOf is the detail text of m: m without its column fields (those strip clears, the
// fields columns lists). When the memo's own encoding of id's detail equals m's detail fields,
// it is answered without a copy of m; otherwise m's copy, stripped, is encoded and kept (encode).
// A transaction writes back the detail it read far more often than it changes it.
func (d *detailMemo[M]) encodeOf(id string, m M, columns *detailColumns, strip func(c M)) (string, error) {
	if id != "" {
		d.mu.Lock()
		e, ok := d.m[id]
		d.mu.Unlock()
		if ok && e.ours && columns.detailEqual(m.ProtoReflect(), e.detail.ProtoReflect()) {
			return e.text, nil
		}
	}
	c := proto.CloneOf(m)
	strip(c)
	return d.encode(id, c)
}

// detailColumns are the fields of a message type that are columns of its row, not detail.
type detailColumns struct {
	column []bool // by the field's index in its message
	count  int
}

// newDetailColumns answers the column fields of m's type from their names; it panics on a name
// m's type lacks (a programming error: the list and the proto disagree).
func newDetailColumns(m proto.Message, names ...protoreflect.Name) *detailColumns {
	fields := m.ProtoReflect().Descriptor().Fields()
	c := &detailColumns{column: make([]bool, fields.Len())}
	for _, n := range names {
		fd := fields.ByName(n)
		if fd == nil {
			panic(fmt.Sprintf("store: %s has no field %q", m.ProtoReflect().Descriptor().FullName(), n))
		}
		if !c.column[fd.Index()] {
			c.column[fd.Index()] = true
			c.count++
		}
	}
	return c
}

// isColumn reports whether fd, a field of the columns' message type, is a column.
func (c *detailColumns) isColumn(fd protoreflect.FieldDescriptor) bool { return c.column[fd.Index()] }

// detailEqual reports whether the detail fields of m (every field but the columns) equal those
// of detail, a message of the same type holding only detail fields, as proto.Equal compares
// them: the same fields set with equal values, and the same unknown fields.
func (c *detailColumns) detailEqual(m, detail protoreflect.Message) bool {
	if m.Descriptor() != detail.Descriptor() || !bytes.Equal(m.GetUnknown(), detail.GetUnknown()) {
		return false
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		if c.column[i] {
			continue
		}
		fd := fields.Get(i)
		has := m.Has(fd)
		if has != detail.Has(fd) {
			return false
		}
		if has && !m.Get(fd).Equal(detail.Get(fd)) {
			return false
		}
	}
	return true
}

// encode is the detail text of c, a message holding only its detail fields, which the memo keeps
// (the caller must not change it afterwards).
func (d *detailMemo[M]) encode(id string, c M) (string, error) {
	if id != "" {
		d.mu.Lock()
		e, ok := d.m[id]
		d.mu.Unlock()
		if ok && e.ours && proto.Equal(e.detail, c) {
			return e.text, nil
		}
	}
	b, err := protojson.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("store: encode %s: %w", c.ProtoReflect().Descriptor().Name(), err)
	}
	text := string(b)
	if text == "" {
		text = "{}"
	}
	if id != "" {
		d.mu.Lock()
		d.put(id, detailEntry[M]{text: text, detail: c, ours: true})
		d.mu.Unlock()
	}
	return text, nil
}

func decodeDetail[M proto.Message](text string) (M, error) {
	var zero M
	e := zero.ProtoReflect().Type().New().Interface().(M)
	if text == "{}" {
		return e, nil
	}
	if err := unmarshal.Unmarshal([]byte(text), e); err != nil {
		return zero, err
	}
	return e, nil
}
