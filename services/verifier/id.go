package verifier

import (
	"crypto/rand"
	"time"
)

// crockford is the alphabet of ULIDs (Crockford's base32: no I, L, O, U).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID answers prefix + "_" + a ULID for now: 48 bits of milliseconds then 80 random bits, 26
// characters that sort by time.
func newID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	// 128 bits as 26 base32 characters, the first holding the top 3 bits.
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
	return prefix + "_" + string(out[:])
}
