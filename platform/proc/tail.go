package proc

import "sync"

// TailBuffer is an io.Writer that keeps the last bytes written to it, up to a cap, and counts
// all of them: output is judged on its end, and a process printing gigabytes costs the cap in
// memory. It is safe for concurrent use.
type TailBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte // ring of up to max bytes
	start int    // index of the oldest byte once the ring is full
	total int64
}

// NewTailBuffer returns a TailBuffer keeping the last max bytes (at least 1).
func NewTailBuffer(max int64) *TailBuffer {
	if max <= 0 {
		max = 1
	}
	return &TailBuffer{max: int(max)}
}

// Write keeps the end of what was written so far; it never fails.
func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if len(p) >= b.max {
		// Only the end of p survives.
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		b.start = 0
		return n, nil
	}
	if len(b.buf) < b.max {
		room := b.max - len(b.buf)
		if len(p) <= room {
			b.buf = append(b.buf, p...)
			return n, nil
		}
		b.buf = append(b.buf, p[:room]...)
		p = p[room:]
	}
	// The ring is full: overwrite the oldest bytes.
	for len(p) > 0 {
		c := copy(b.buf[b.start:], p)
		p = p[c:]
		b.start = (b.start + c) % b.max
	}
	return n, nil
}

// String answers the bytes kept, oldest first.
func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) < b.max || b.start == 0 {
		return string(b.buf)
	}
	return string(b.buf[b.start:]) + string(b.buf[:b.start])
}

// Total answers how many bytes were written.
func (b *TailBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Discarded answers how many of the bytes written were dropped.
func (b *TailBuffer) Discarded() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total - int64(len(b.buf))
}

// Truncated reports whether bytes were dropped.
func (b *TailBuffer) Truncated() bool {
	return b.Discarded() > 0
}
