package check

import (
	"sync"
)

// tailBuffer keeps the last max bytes written to it and counts all of them: command output is
// judged on its end (where test runners and compilers put the verdict), and a process printing
// gigabytes costs the verifier max bytes of memory.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte // ring of up to max bytes
	start int    // index of the oldest byte once the ring is full
	total int64
}

func newTailBuffer(max int64) *tailBuffer {
	if max <= 0 {
		max = 1
	}
	return &tailBuffer{max: int(max)}
}

func (b *tailBuffer) Write(p []byte) (int, error) {
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
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) < b.max || b.start == 0 {
		return string(b.buf)
	}
	return string(b.buf[b.start:]) + string(b.buf[:b.start])
}

// Total answers how many bytes were written.
func (b *tailBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Truncated reports whether bytes were dropped.
func (b *tailBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > int64(len(b.buf))
}
