package plan

// The packer's sets (node, class) → waves of the current level, kept in one open-addressing hash
// table whose entries carry a generation: starting a level is one increment of the generation
// (every entry of the level before becomes empty at once, nothing is cleared), and a per-node
// stamp says which of the node's sets have an entry in this generation, so that a task whose
// paths no other task of its level touched never hashes at all.

// member is one wave in one set. next and nextW are the union-find pointers of the "any" and
// "writer" flavours (the next wave to try); who and whoW the first task, and the first writer,
// that put the wave in the set.
type member struct {
	next, nextW int32
	who, whoW   int32
	writer      bool
}

// slot is one entry of the table: empty unless gen is the table's generation.
type slot struct {
	key uint64
	gen uint32
	m   member
}

// setTable maps key(node, class, wave) to the wave's membership, for the current generation.
type setTable struct {
	slots []slot
	mask  uint64
	shift uint
	gen   uint32
	count int // entries of this generation
	// stamp, per node, is the last generation any of the node's sets had an entry in (shifted
	// left by classes) and which of them did (a bit per class): one 4-byte word per node, so
	// that the look at a node no other task of the level touched (nearly every node) stays in
	// the cache.
	stamp []uint32
}

// maxGen is the first generation a stamp cannot hold.
const maxGen = 1 << (32 - classes)

// newSetTable makes a table for the sets of nodes nodes. It starts small (a level's entries are few, and a
// small table stays in the cache) and grows with the largest level.
func newSetTable(nodes int) *setTable {
	t := &setTable{gen: 1, stamp: make([]uint32, nodes)}
	t.alloc(256)
	return t
}

// reset empties the table for a plan with nodes nodes: one increment of its generation (the stamps
// and slots of older generations read as empty), so a plan reuses the slots and stamps of the one
// before (the packer's pool) instead of allocating (and the GC scanning) them anew.
func (t *setTable) reset(nodes int) {
	t.next()
	if len(t.stamp) < nodes {
		t.stamp = make([]uint32, nodes) // zero: older than every generation
	}
}

// alloc gives the table room for at least n slots (a power of two), all empty.
func (t *setTable) alloc(n int) {
	size, shift := 1, uint(64)
	for size < n {
		size, shift = size*2, shift-1
	}
	t.slots = make([]slot, size)
	t.mask, t.shift = uint64(size-1), shift
}

// next starts a generation: the table is empty again.
func (t *setTable) next() {
	t.gen++
	t.count = 0
	if t.gen == maxGen { // wrapped (after 268 million levels): clear for real
		clear(t.slots)
		clear(t.stamp)
		t.gen = 1
	}
}

func (t *setTable) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// has reports whether the set (node, class) has any entry in this generation.
func (t *setTable) has(node int32, class int) bool {
	s := t.stamp[node]
	return s>>classes == t.gen && s&(1<<class) != 0
}

// get returns the membership at k, or nil.
func (t *setTable) get(k uint64) *member {
	for h := t.home(k); ; h = (h + 1) & t.mask {
		s := &t.slots[h]
		if s.gen != t.gen {
			return nil
		}
		if s.key == k {
			return &s.m
		}
	}
}

// put returns the membership at k, inserting m when there is none (inserted is then true). The
// pointer is good until the next put.
func (t *setTable) put(node int32, class int, k uint64, m member) (_ *member, inserted bool) {
	if 2*(t.count+1) > len(t.slots) {
		t.grow()
	}
	for h := t.home(k); ; h = (h + 1) & t.mask {
		s := &t.slots[h]
		if s.gen != t.gen {
			*s = slot{key: k, gen: t.gen, m: m}
			t.count++
			st := t.stamp[node]
			if st>>classes != t.gen {
				st = t.gen << classes
			}
			t.stamp[node] = st | 1<<class
			return &s.m, true
		}
		if s.key == k {
			return &s.m, false
		}
	}
}

// grow doubles the table, keeping this generation's entries.
func (t *setTable) grow() {
	old := t.slots
	t.alloc(2 * len(old))
	for i := range old {
		if old[i].gen != t.gen {
			continue
		}
		h := t.home(old[i].key)
		for t.slots[h].gen == t.gen {
			h = (h + 1) & t.mask
		}
		t.slots[h] = old[i]
	}
}
