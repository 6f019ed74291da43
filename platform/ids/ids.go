// Package ids makes the server-assigned ids of converge resources: "<prefix>_<ULID>", e.g.
// "tl_01JH3V8Q2T5N3X7Y9Z1A2B3C4D". A ULID (https://github.com/ulid/spec) is 48 bits of Unix
// milliseconds then 80 random bits, written as 26 characters of Crockford's base 32 (no I, L, O,
// U), so ids sort by creation time as strings.
//
// The generator is monotonic within a millisecond, as the spec's monotonic generator is: an id
// made for the same millisecond as the previous one increments the previous id's random part, so
// ids of one process made in one millisecond sort in the order they were made. An id for another
// millisecond, later or earlier (an injected clock, a clock stepped back), gets fresh random bits
// and always holds the time it was given.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

// crockford is the alphabet of ULIDs: Crockford's base 32, without I, L, O and U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Len is the length of a ULID in characters.
const Len = 26

// maxTime is the largest millisecond a ULID holds (48 bits).
const maxTime = 1<<48 - 1

var gen struct {
	mu      sync.Mutex
	ms      uint64
	entropy [10]byte
}

// New returns prefix + "_" + a ULID for now (see the package doc for its order).
func New(prefix string, now time.Time) string {
	return prefix + "_" + ULID(now)
}

// ULID returns a ULID for now, monotonic within the process.
func ULID(now time.Time) string {
	ms := uint64(max(now.UnixMilli(), 0))
	if ms > maxTime {
		ms = maxTime
	}
	gen.mu.Lock()
	defer gen.mu.Unlock()
	if ms != gen.ms || !increment(&gen.entropy) {
		// Another millisecond (or, once in 2^80, an exhausted one: fresh bits then, which may
		// sort before the previous id of that millisecond).
		gen.ms = ms
		_, _ = rand.Read(gen.entropy[:]) // crypto/rand.Read never fails on supported platforms
	}
	return Encode(gen.ms, gen.entropy)
}

// increment adds one to the big-endian number b, answering false if it overflowed.
func increment(b *[10]byte) bool {
	for i := len(b) - 1; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			return true
		}
	}
	return false
}

// Encode writes the ULID of the millisecond ms (its low 48 bits) and entropy: the 128 bits
// big-endian as 26 base-32 digits, the first digit holding the top 3 bits.
func Encode(ms uint64, entropy [10]byte) string {
	var b [16]byte
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	copy(b[6:], entropy[:])
	hi, lo := binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])
	var out [Len]byte
	for i := Len - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Time returns the time a ULID (or "<prefix>_<ULID>" id) was made, to the millisecond, and
// false if s does not end in a ULID.
func Time(s string) (time.Time, bool) {
	if len(s) < Len {
		return time.Time{}, false
	}
	u := s[len(s)-Len:]
	if u[0] > '7' { // 26 digits hold 130 bits: the first holds only 3
		return time.Time{}, false
	}
	var ms uint64
	for i := range 10 {
		d := strings.IndexByte(crockford, u[i])
		if d < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(d)
	}
	for i := 10; i < Len; i++ {
		if strings.IndexByte(crockford, u[i]) < 0 {
			return time.Time{}, false
		}
	}
	return time.UnixMilli(int64(ms)).UTC(), true
}
