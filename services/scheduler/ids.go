package scheduler

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is the alphabet of ULIDs: Crockford's base 32, without I, L, O and U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID returns a server id "<prefix>_<ulid>" (e.g. "tl_01JH3V..."): 48 bits of milliseconds then
// 80 random bits, 26 characters that sort by creation time.
func newID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	_, _ = rand.Read(b[6:]) // crypto/rand never fails on supported platforms
	// 128 bits as 26 base-32 digits: the first digit holds the top 3 bits.
	hi, lo := binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return prefix + "_" + string(out[:])
}
