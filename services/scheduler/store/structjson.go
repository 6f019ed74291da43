package store

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// structJSON is the JSON text of s as protojson.Marshal writes it (without the random spaces
// protojson adds to keep callers from depending on its bytes): keys sorted, strings escaped as
// protojson escapes them, numbers formatted as protojson formats doubles. Every log entry's context
// is encoded in its transaction, and protojson's reflection over the Struct's map was a visible
// part of a claim's or completion's CPU. What protojson refuses (invalid UTF-8, a NaN or infinite
// number, a value without a kind) goes to protojson itself, for its error.
func structJSON(s *structpb.Struct) (string, error) {
	if b, ok := appendStruct(make([]byte, 0, 128), s); ok {
		return string(b), nil
	}
	b, err := protojson.Marshal(s)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "{}", nil
	}
	return string(b), nil
}

func appendStruct(out []byte, s *structpb.Struct) ([]byte, bool) {
	fields := s.GetFields()
	out = append(out, '{')
	if len(fields) > 0 {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			var ok bool
			if out, ok = appendJSONString(out, k); !ok {
				return out, false
			}
			out = append(out, ':')
			if out, ok = appendValue(out, fields[k]); !ok {
				return out, false
			}
		}
	}
	return append(out, '}'), true
}

func appendValue(out []byte, v *structpb.Value) ([]byte, bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return append(out, "null"...), true
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(out, k.BoolValue), true
	case *structpb.Value_StringValue:
		return appendJSONString(out, k.StringValue)
	case *structpb.Value_NumberValue:
		return appendNumber(out, k.NumberValue)
	case *structpb.Value_StructValue:
		if k.StructValue == nil {
			return out, false
		}
		return appendStruct(out, k.StructValue)
	case *structpb.Value_ListValue:
		if k.ListValue == nil {
			return out, false
		}
		out = append(out, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				out = append(out, ',')
			}
			var ok bool
			if out, ok = appendValue(out, e); !ok {
				return out, false
			}
		}
		return append(out, ']'), true
	default:
		return out, false
	}
}

// appendNumber formats n as protojson formats a double (encoding/json's rule: exponent form below
// 1e-6 and from 1e21, its exponent without a leading zero).
func appendNumber(out []byte, n float64) ([]byte, bool) {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return out, false
	}
	f := byte('f')
	if abs := math.Abs(n); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		f = 'e'
	}
	out = strconv.AppendFloat(out, n, f, -1, 64)
	if f == 'e' {
		if l := len(out); l >= 4 && out[l-4] == 'e' && out[l-3] == '-' && out[l-2] == '0' {
			out[l-2] = out[l-1]
			out = out[:l-1]
		}
	}
	return out, true
}

// appendJSONString quotes s as protojson does: `"`, `\` and control characters escaped, the
// short forms where JSON has them, everything else as is. Invalid UTF-8 is not ok.
func appendJSONString(out []byte, s string) ([]byte, bool) {
	out = append(out, '"')
	for len(s) > 0 {
		c := s[0]
		if c >= ' ' && c != '"' && c != '\\' && c < utf8.RuneSelf {
			out = append(out, c)
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			return out, false
		case r < ' ' || r == '"' || r == '\\':
			out = append(out, '\\')
			switch r {
			case '"', '\\':
				out = append(out, byte(r))
			case '\b':
				out = append(out, 'b')
			case '\f':
				out = append(out, 'f')
			case '\n':
				out = append(out, 'n')
			case '\r':
				out = append(out, 'r')
			case '\t':
				out = append(out, 't')
			default:
				out = append(out, 'u')
				out = append(out, "0000"[1+(bits.Len32(uint32(r))-1)/4:]...)
				out = strconv.AppendUint(out, uint64(r), 16)
			}
		default:
			out = append(out, s[:n]...)
		}
		s = s[n:]
	}
	return append(out, '"'), true
}
