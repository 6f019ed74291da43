package check

import (
	"context"
	"io"
	"os"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/converge-dev/converge/platform/proc"
)

// OutputBudget bounds the memory all command checks of a verifier keep their output in (the
// tails their assertions judge): a check takes its share before it runs; one that cannot get it
// at once keeps its output in a file instead (a ring of the same cap, so the disk is bounded
// too) and reads the tail back when memory is free. Every check still judges the last
// output_cap_bytes of its output; only when the tails are in memory together is bounded.
type OutputBudget struct {
	total int64
	sem   *semaphore.Weighted
}

// NewOutputBudget returns a budget of total bytes (at least 1 MiB).
func NewOutputBudget(total int64) *OutputBudget {
	total = max(total, 1<<20)
	return &OutputBudget{total: total, sem: semaphore.NewWeighted(total)}
}

// Total answers the budget's size.
func (b *OutputBudget) Total() int64 { return b.total }

func (b *OutputBudget) share(n int64) int64 { return min(n, b.total) }

// outputTail is where one output stream of a command goes: a TailBuffer in memory, or a fileTail.
type outputTail interface {
	io.Writer
	Total() int64
	Truncated() bool
}

// capture is the two output streams of one command check and the budget they hold.
type capture struct {
	budget  *OutputBudget
	cap     int64
	held    int64
	stdout  outputTail
	stderr  outputTail
	scratch string
	spilled bool
}

// newCapture takes 2×cap of the budget, or spills both streams to files under dir.
func newCapture(b *OutputBudget, outputCap int64, dir string) (*capture, error) {
	c := &capture{budget: b, cap: outputCap, scratch: dir}
	if b == nil || b.sem.TryAcquire(b.share(2*outputCap)) {
		if b != nil {
			c.held = b.share(2 * outputCap)
		}
		c.stdout, c.stderr = proc.NewTailBuffer(outputCap), proc.NewTailBuffer(outputCap)
		return c, nil
	}
	c.spilled = true
	out, err := newFileTail(dir, outputCap)
	if err != nil {
		return nil, err
	}
	errOut, err := newFileTail(dir, outputCap)
	if err != nil {
		out.close()
		return nil, err
	}
	c.stdout, c.stderr = out, errOut
	return c, nil
}

// texts answers the tails kept, waiting for budget to read spilled ones back.
func (c *capture) texts(ctx context.Context) (string, string, error) {
	if !c.spilled {
		return c.stdout.(*proc.TailBuffer).String(), c.stderr.(*proc.TailBuffer).String(), nil
	}
	n := c.budget.share(2 * c.cap)
	if err := c.budget.sem.Acquire(ctx, n); err != nil {
		return "", "", err
	}
	c.held = n
	out, err := c.stdout.(*fileTail).String()
	if err != nil {
		return "", "", err
	}
	errOut, err := c.stderr.(*fileTail).String()
	return out, errOut, err
}

// release gives the memory back and removes the files.
func (c *capture) release() {
	if c.budget != nil && c.held > 0 {
		c.budget.sem.Release(c.held)
		c.held = 0
	}
	if f, ok := c.stdout.(*fileTail); ok {
		f.close()
	}
	if f, ok := c.stderr.(*fileTail); ok {
		f.close()
	}
}

// fileTail keeps the last cap bytes written to it in a file used as a ring.
type fileTail struct {
	mu    sync.Mutex
	f     *os.File
	cap   int64
	total int64
}

func newFileTail(dir string, capBytes int64) (*fileTail, error) {
	f, err := os.CreateTemp(dir, "converge-output-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name()) // only the descriptor: nothing is left behind
	return &fileTail{f: f, cap: max(capBytes, 1)}, nil
}

func (t *fileTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if int64(len(p)) > t.cap {
		t.total += int64(len(p)) - t.cap
		p = p[int64(len(p))-t.cap:]
	}
	for len(p) > 0 {
		off := t.total % t.cap
		chunk := p[:min(int64(len(p)), t.cap-off)]
		if _, err := t.f.WriteAt(chunk, off); err != nil {
			return 0, err
		}
		t.total += int64(len(chunk))
		p = p[len(chunk):]
	}
	return n, nil
}

func (t *fileTail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

func (t *fileTail) Truncated() bool { return t.Total() > t.cap }

// String reads the kept bytes back, oldest first.
func (t *fileTail) String() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total <= t.cap {
		b := make([]byte, t.total)
		_, err := t.f.ReadAt(b, 0)
		return string(b), ignoreEOF(err)
	}
	b := make([]byte, t.cap)
	start := t.total % t.cap
	if _, err := t.f.ReadAt(b[:t.cap-start], start); ignoreEOF(err) != nil {
		return "", err
	}
	if _, err := t.f.ReadAt(b[t.cap-start:], 0); ignoreEOF(err) != nil {
		return "", err
	}
	return string(b), nil
}

func (t *fileTail) close() { _ = t.f.Close() }

func ignoreEOF(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}
