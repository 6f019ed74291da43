package plan

import (
	"hash/maphash"
	"strings"
)

// The path tree's ids: each distinct path (file or directory, without a directory's trailing
// "/") and glob pattern of a plan gets an id, its parent directory first. A plan of 100,000 tasks
// interns some 200,000 paths, nearly all of them cold (not in any cache): a purpose-built table
// hashes each path once and probes 8-byte slots (a tag of the hash and the id), where a
// map[string]int32 hashes a new path twice (look-up, then insert) and probes 24-byte entries.
// The path's bytes are compared only when the tags agree (1 in 4 billion for different paths).

// internTable maps paths to ids.
type internTable struct {
	slots []uint64 // tag<<32 | id+1; 0 is empty
	mask  uint64
	shift uint
	keys  []string // each id's path
	seed  maphash.Seed
	// parent is each id's parent directory (-1 at the top).
	parent []int32
}

// newInternTable makes a table for about n paths.
func newInternTable(n int) *internTable {
	t := &internTable{seed: internSeed, keys: make([]string, 0, n), parent: make([]int32, 0, n)}
	t.alloc(2 * n)
	return t
}

// internSeed hashes every plan's paths (the plan does not depend on it: only the table's layout
// does).
var internSeed = maphash.MakeSeed()

// alloc gives the table at least n empty slots (a power of two, at least 64).
func (t *internTable) alloc(n int) {
	size, shift := 64, uint(64-6)
	for size < n {
		size, shift = size*2, shift-1
	}
	t.slots = make([]uint64, size)
	t.mask, t.shift = uint64(size-1), shift
}

// home is the first slot probed for a hash.
func (t *internTable) home(h uint64) uint64 { return (h * 0x9E3779B97F4A7C15) >> t.shift }

// intern returns the id of path, interning its parent directories first.
func (t *internTable) intern(path string) int32 {
	h := maphash.String(t.seed, path)
	tag := h >> 32
	for i := t.home(h); ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			break
		}
		if s>>32 == tag {
			if id := int32(uint32(s) - 1); t.keys[id] == path {
				return id
			}
		}
	}
	// A new path: its parent first (which may move the slots), then the first empty slot.
	parent := int32(-1)
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		parent = t.intern(path[:i])
	}
	id := int32(len(t.keys))
	t.keys = append(t.keys, path)
	t.parent = append(t.parent, parent)
	if 2*len(t.keys) > len(t.slots) {
		t.grow()
	}
	i := t.home(h)
	for t.slots[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = tag<<32 | uint64(id+1)
	return id
}

// grow doubles the table. The slots do not keep the whole hash: each key is hashed again.
func (t *internTable) grow() {
	old := t.slots
	t.alloc(2 * len(old))
	for _, s := range old {
		if s == 0 {
			continue
		}
		h := maphash.String(t.seed, t.keys[uint32(s)-1])
		i := t.home(h)
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = s
	}
}
