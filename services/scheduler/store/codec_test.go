package store

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// protojsonCompact is protojson's text of s without the spaces it adds at random.
func protojsonCompact(t testing.TB, s *structpb.Struct) (string, error) {
	b, err := protojson.Marshal(s)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("compact %s: %v", b, err)
	}
	if out.Len() == 0 {
		return "{}", nil
	}
	return out.String(), nil
}

func checkStructJSON(t testing.TB, s *structpb.Struct) {
	want, werr := protojsonCompact(t, s)
	got, gerr := structJSON(s)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("structJSON(%v) error %v, protojson's %v", s, gerr, werr)
	}
	if werr == nil && got != want {
		t.Fatalf("structJSON(%v)\n got %s\nwant %s", s, got, want)
	}
}

// TestStructJSONIsProtojson: a log context is written with the bytes protojson writes (but for
// its random spaces), and refused where protojson refuses it.
func TestStructJSONIsProtojson(t *testing.T) {
	nested, _ := structpb.NewStruct(map[string]any{
		"attempt": 3.0, "error": map[string]any{"code": "TIMEOUT", "empty": map[string]any{}},
		"ok": false, "yes": true, "none": nil, "files": []any{"a", "b", 1.5, []any{}, map[string]any{"z": 1.0}},
		"quote\"back\\slash": "tab\tnl\nret\rbs\bff\fnul\x00ctl\x1f<>&\u2028é😀\ufffd",
		"numbers":            []any{0.0, math.Copysign(0, -1), 1e-6, 9.99e-7, 1e20, 1e21, 123456789.123, -2.5e-300, 1.7976931348623157e308, 5e-324},
	})
	cases := []*structpb.Struct{
		{},
		{Fields: map[string]*structpb.Value{}},
		nested,
		{Fields: map[string]*structpb.Value{"b": structpb.NewNumberValue(2), "a": structpb.NewStringValue(""), "": structpb.NewNullValue()}},
		// Refused by protojson, so by structJSON.
		{Fields: map[string]*structpb.Value{"nan": structpb.NewNumberValue(math.NaN())}},
		{Fields: map[string]*structpb.Value{"inf": structpb.NewNumberValue(math.Inf(-1))}},
		{Fields: map[string]*structpb.Value{"bad": structpb.NewStringValue("\xff")}},
		{Fields: map[string]*structpb.Value{"\xfe": structpb.NewBoolValue(true)}},
		{Fields: map[string]*structpb.Value{"nokind": {}}},
	}
	for _, s := range cases {
		checkStructJSON(t, s)
	}
}

func FuzzStructJSONIsProtojson(f *testing.F) {
	f.Add(`{"a":1,"b":[true,null,"x\u0001"],"c":{"d":1e-7}}`)
	f.Add(`{"":"\u2028é","z":-0.0000012,"y":1e300}`)
	f.Fuzz(func(t *testing.T, text string) {
		s := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(text), s); err != nil {
			return
		}
		checkStructJSON(t, s)
	})
}

// TestExecutionDetailMemo: the second read of the same detail text is a clone of the memo's
// message (not decoded again, not shared with the first reader), a different text is decoded,
// and a write of an unchanged detail reuses the text protojson wrote for it.
func TestExecutionDetailMemo(t *testing.T) {
	m := newDetailMemo[*schedulerv1.Execution]()
	e := &schedulerv1.Execution{BaseCommit: "abc", RunBranch: "run/1", StatusMessage: "x"}
	text, err := m.encode("e1", proto.CloneOf(e))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := protojson.Marshal(e); text != string(want) {
		t.Fatalf("encode = %s, want protojson's %s", text, want)
	}
	first, err := m.decode("e1", text)
	if err != nil || !proto.Equal(first, e) {
		t.Fatalf("decode = %v, %v; want %v", first, err, e)
	}
	first.BaseCommit = "changed by its reader"
	second, err := m.decode("e1", text)
	if err != nil || !proto.Equal(second, e) {
		t.Fatalf("decode after a reader's change = %v, %v; want %v", second, err, e)
	}
	if m.m["e1"].detail == second || m.m["e1"].detail == first {
		t.Fatal("decode handed out the memo's own message")
	}
	// Another writer's text (another process, another replica).
	other := `{"baseCommit":"def"}`
	third, err := m.decode("e1", other)
	if err != nil || third.GetBaseCommit() != "def" || third.GetRunBranch() != "" {
		t.Fatalf("decode of another text = %v, %v", third, err)
	}
	// Not this process's encoding: a write of the same detail is encoded again.
	if m.m["e1"].ours {
		t.Fatal("a text read is taken for this process's encoding")
	}
	again, err := m.encode("e1", &schedulerv1.Execution{BaseCommit: "def"})
	if want, _ := protojson.Marshal(&schedulerv1.Execution{BaseCommit: "def"}); err != nil || again != string(want) {
		t.Fatalf("encode = %s, %v; want %s", again, err, want)
	}
	if !m.m["e1"].ours {
		t.Fatal("the memo does not keep its own encoding")
	}
	// A changed detail is encoded again.
	changed := &schedulerv1.Execution{BaseCommit: "def", CreateTime: timestamppb.Now()}
	changedText, err := m.encode("e1", proto.CloneOf(changed))
	if want, _ := protojson.Marshal(changed); err != nil || changedText != string(want) {
		t.Fatalf("encode of a changed detail = %s, %v; want %s", changedText, err, want)
	}
	// Bounded.
	for i := range 3 * detailMemoSize {
		if _, err := m.decode(string(rune('a'+i%26))+string(rune(i)), "{}"); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.m) > detailMemoSize {
		t.Fatalf("memo holds %d entries, more than %d", len(m.m), detailMemoSize)
	}
}

// TestDetailMemoLearnsTheDatabaseText: Postgres's jsonb answers the detail in its own form (key
// order, spaces), not the text written. The first read of that form decodes it; as it is the
// memo's message, the memo keeps the form as an alias: the next read of it is a clone, and a write
// of the unchanged detail still reuses the memo's own encoding. A read of a changed detail in
// either form is decoded.
func TestDetailMemoLearnsTheDatabaseText(t *testing.T) {
	m := newDetailMemo[*schedulerv1.Execution]()
	e := &schedulerv1.Execution{BaseCommit: "abc", RunBranch: "run/1"}
	text, err := m.encode("e1", proto.CloneOf(e))
	if err != nil {
		t.Fatal(err)
	}
	jsonb := `{"runBranch": "run/1", "baseCommit": "abc"}` // as jsonb::text prints it
	got, err := m.decode("e1", jsonb)
	if err != nil || !proto.Equal(got, e) {
		t.Fatalf("decode of the database's form = %v, %v; want %v", got, err, e)
	}
	if m.m["e1"].alias != jsonb || m.m["e1"].text != text || !m.m["e1"].ours {
		t.Fatalf("entry after the database's form: %+v; want the alias kept beside the memo's own text", m.m["e1"])
	}
	// The alias is a hit: the memo's message, cloned. A poisoned memo message shows a hit.
	m.m["e1"].detail.StatusMessage = "from the memo"
	got, err = m.decode("e1", jsonb)
	if err != nil || got.GetStatusMessage() != "from the memo" {
		t.Fatalf("decode of the alias = %v, %v; want the memo's message", got, err)
	}
	if got == m.m["e1"].detail {
		t.Fatal("decode handed out the memo's own message")
	}
	m.m["e1"].detail.StatusMessage = ""
	again, err := m.encode("e1", proto.CloneOf(e))
	if err != nil || again != text {
		t.Fatalf("encode of the unchanged detail = %s, %v; want the memo's own %s", again, err, text)
	}
	// Another replica's change, in the database's form: decoded, and it replaces the entry.
	changed := `{"runBranch": "run/2", "baseCommit": "abc"}`
	got, err = m.decode("e1", changed)
	if err != nil || got.GetRunBranch() != "run/2" {
		t.Fatalf("decode of a changed detail = %v, %v", got, err)
	}
	if m.m["e1"].text != changed || m.m["e1"].ours || m.m["e1"].alias != "" {
		t.Fatalf("entry after a changed detail: %+v; want the new text, not ours, no alias", m.m["e1"])
	}
	got, err = m.decode("e1", jsonb)
	if err != nil || got.GetRunBranch() != "run/1" {
		t.Fatalf("decode of the old form after a change = %v, %v; want it decoded", got, err)
	}
}

// TestEncodeWaveDetail: a wave without placements (every other field is a column) is stored with
// the detail protojson gives it, "{}", without encoding; one with placements keeps them.
func TestEncodeWaveDetail(t *testing.T) {
	start := timestamppb.New(timestamppb.Now().AsTime())
	w := &schedulerv1.Wave{Id: "wv_1", ExecutionId: "ex_1", WaveNumber: 2, Status: schedulerv1.WaveStatus_WAVE_STATUS_RUNNING,
		TaskCount: 3, CompletedCount: 1, FailedCount: 1, SkippedCount: 1, ActiveAgents: 2, BaseCommit: "abc",
		IntegrationCommit: "def", StartTime: start, EndTime: start}
	r, err := EncodeWave(w)
	if err != nil {
		t.Fatal(err)
	}
	if r.Detail != "{}" {
		t.Fatalf("detail of a wave without placements = %s, want {}", r.Detail)
	}
	back, err := DecodeWave(r)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, w) {
		t.Fatalf("decoded %v, want %v", back, w)
	}
	w.Placements = []*schedulerv1.WavePlacement{{TaskId: "t1"}}
	if r, err = EncodeWave(w); err != nil {
		t.Fatal(err)
	}
	if back, err = DecodeWave(r); err != nil {
		t.Fatal(err)
	}
	if r.Detail == "{}" || !proto.Equal(back, w) {
		t.Fatalf("wave with placements: detail %s, decoded %v", r.Detail, back)
	}
}
