package ids

import (
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEncodeKnownVectors checks the encoding against the ULID spec's example and hand-computed
// edges.
func TestEncodeKnownVectors(t *testing.T) {
	ones := [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := []struct {
		ms      uint64
		entropy [10]byte
		want    string
	}{
		// The spec's timestamp example: 1469918176385 is "01ARYZ6S41".
		{1469918176385, [10]byte{}, "01ARYZ6S410000000000000000"},
		{0, [10]byte{}, "00000000000000000000000000"},
		{maxTime, ones, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"},
		{0, [10]byte{9: 1}, "00000000000000000000000001"},
		{1, [10]byte{}, "00000000010000000000000000"},
	}
	for _, c := range cases {
		if got := Encode(c.ms, c.entropy); got != c.want {
			t.Errorf("Encode(%d, %x) = %s, want %s", c.ms, c.entropy, got, c.want)
		}
	}
}

func TestNewShapeAndTime(t *testing.T) {
	now := time.Date(2026, 11, 24, 22, 0, 0, 123e6, time.UTC)
	id := New("tl", now)
	u, ok := strings.CutPrefix(id, "tl_")
	if !ok || len(u) != Len {
		t.Fatalf("New = %q, want tl_ and 26 characters", id)
	}
	for _, r := range u {
		if !strings.ContainsRune(crockford, r) {
			t.Fatalf("New = %q: %q is not Crockford base 32", id, r)
		}
	}
	got, ok := Time(id)
	if !ok || !got.Equal(now.Truncate(time.Millisecond)) {
		t.Fatalf("Time(%q) = %v, %v", id, got, ok)
	}
	if _, ok := Time("tl_nope"); ok {
		t.Fatal("Time of a short id answered ok")
	}
}

// TestSortsByTime: ids of later milliseconds sort after earlier ones, and ids of one
// millisecond sort in the order they were made; an id for an earlier time holds that time.
func TestSortsByTime(t *testing.T) {
	base := time.Now().Add(200 * 365 * 24 * time.Hour)
	var made []string
	for i := range 200 {
		made = append(made, New("x", base.Add(time.Duration(i/10)*time.Millisecond)))
	}
	made = append(made, New("x", base.Add(time.Second)))
	back := New("x", base.Add(-time.Hour)) // the clock stepped back
	if got, _ := Time(back); !got.Equal(base.Add(-time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("an id for an earlier time holds %v", got)
	}
	if !slices.IsSorted(made) {
		t.Fatalf("ids do not sort in the order they were made: %v", made)
	}
	seen := map[string]bool{}
	for _, id := range made {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
}

func TestIncrementCarries(t *testing.T) {
	b := [10]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}
	if !increment(&b) || b != [10]byte{8: 1} {
		t.Fatalf("increment carry: %x", b)
	}
	all := [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if increment(&all) {
		t.Fatal("increment of all ones did not report overflow")
	}
}

// byteWiseEncode is the Verifier's former encoder (bytes fed from the low end through a bit
// accumulator), kept as an independent reference: the Scheduler's former encoder is Encode.
func byteWiseEncode(b [16]byte) string {
	var out [26]byte
	var acc uint64
	bits := 0
	j := 25
	for i := 15; i >= 0; i-- {
		acc |= uint64(b[i]) << bits
		bits += 8
		for bits >= 5 && j >= 0 {
			out[j] = crockford[acc&31]
			acc >>= 5
			bits -= 5
			j--
		}
	}
	for ; j >= 0; j-- {
		out[j] = crockford[acc&31]
		acc >>= 5
	}
	return string(out[:])
}

// TestFormerEncodersAgree: the two generators this package replaced wrote the same encoding.
func TestFormerEncodersAgree(t *testing.T) {
	for range 1000 {
		var b [16]byte
		_, _ = rand.Read(b[:])
		ms := uint64(b[0])<<40 | uint64(b[1])<<32 | uint64(b[2])<<24 | uint64(b[3])<<16 | uint64(b[4])<<8 | uint64(b[5])
		var e [10]byte
		copy(e[:], b[6:])
		if got, want := Encode(ms, e), byteWiseEncode(b); got != want {
			t.Fatalf("Encode = %s, byte-wise = %s for %x", got, want, b)
		}
	}
}
