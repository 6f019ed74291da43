package postgres

import "github.com/converge-dev/converge/services/knowledge/store"

// maxHeld bounds the items a store holds in memory to answer queries. An item is about 1 KB
// (its content, evidence, pattern and tags) plus ~130 bytes of bookkeeping (the entry's own
// fields, its map slot), and the frequency sketch 4 × 64 KB: at most ~11.5 MB.
const maxHeld = 10_000

// held is an item the store read to answer a query, held to answer it again without reading it.
type held struct {
	// item is the item as read, its HitCount the item's own column only (hits counted before
	// migration 0005): the rest of its hits are hitsRow and the unwritten ones.
	item store.Item
	// hitsRow is its row of knowledge_item_hits, and hitsKnown whether it is known: as the last
	// flush that wrote this store's hits of it left it, or as read while no flush of this store
	// ran.
	hitsRow   int64
	hitsKnown bool
	// protected tells which of heldSet's lists links the item (prev, next).
	protected  bool
	prev, next *held
}

// heldSet is the items held: a segmented LRU behind a TinyLFU admission, the policy of
// W-TinyLFU without its window. An item read enters on probation; answered again while held, it
// is protected. When the set is full a new item evicts the item on probation answered least
// recently (a protected one only when none is on probation), but only if the new one was
// answered more often lately (the sketch): otherwise it is answered and not held. The protected
// items beyond their share go back on probation, least recently answered first. So the items
// queries keep asking for stay, and a stream of items answered once (rarely queried paths) passes
// by without evicting them: p17know2 measured a random eviction holding fewer of a run's
// answers, and a plain LRU empties itself on any stream of one-off answers longer than it holds.
// Not safe for concurrent use: the store calls it with hits.mu held.
type heldSet struct {
	m                     map[int64]*held
	probation, protected  heldList
	limit, protectedLimit int
	// freq counts how often each item was answered lately, held or not (TinyLFU): a full set
	// holds a new item only if it was answered more often than the one it would evict.
	freq sketch
}

// protectedShare is the part of the held items that may be protected (W-TinyLFU's main region
// keeps the same 80 %).
const protectedShare = 0.8

func newHeldSet(limit int) *heldSet {
	s := &heldSet{m: map[int64]*held{}}
	s.setLimit(limit)
	return s
}

// setLimit bounds the items held to limit (maxHeld but in tests); call it while none is held.
func (s *heldSet) setLimit(limit int) {
	s.limit, s.protectedLimit = limit, max(int(float64(limit)*protectedShare), 1)
	s.freq = newSketch(limit)
}

// answered counts an answer of item id, held or not.
func (s *heldSet) answered(id int64) { s.freq.add(id) }

// get returns the held item id, or nil.
func (s *heldSet) get(id int64) *held { return s.m[id] }

// touch marks e answered now: protected, the most recently answered.
func (s *heldSet) touch(e *held) {
	if e.protected {
		s.protected.moveToFront(e)
		return
	}
	s.probation.unlink(e)
	e.protected = true
	s.protected.pushFront(e)
	if s.protected.n > s.protectedLimit {
		d := s.protected.tail
		s.protected.unlink(d)
		d.protected = false
		s.probation.pushFront(d)
	}
}

// add holds e as item id, on probation, if there is room or it was answered more often lately
// than the item it evicts (the least recently answered on probation, or protected if none is):
// it reports whether it did.
func (s *heldSet) add(id int64, e *held) bool {
	if len(s.m) >= s.limit {
		victim := s.probation.tail
		if victim == nil {
			victim = s.protected.tail
		}
		if victim != nil {
			if s.freq.estimate(id) <= s.freq.estimate(victim.item.ID) {
				return false
			}
			s.remove(victim.item.ID)
		}
	}
	s.m[id] = e
	e.protected = false
	s.probation.pushFront(e)
	return true
}

// addProtected holds e as item id, protected and less recently answered than any held, if that
// evicts nothing: it reports whether it did.
func (s *heldSet) addProtected(id int64, e *held) bool {
	if len(s.m) >= s.limit || s.protected.n >= s.protectedLimit {
		return false
	}
	s.m[id] = e
	e.protected = true
	s.protected.pushBack(e)
	return true
}

// remove drops item id if held.
func (s *heldSet) remove(id int64) {
	e := s.m[id]
	if e == nil {
		return
	}
	delete(s.m, id)
	if e.protected {
		s.protected.unlink(e)
	} else {
		s.probation.unlink(e)
	}
}

// heldList is a list of held items from the most recently answered (head) to the least (tail).
type heldList struct {
	head, tail *held
	n          int
}

func (l *heldList) moveToFront(e *held) {
	if l.head != e {
		l.unlink(e)
		l.pushFront(e)
	}
}

func (l *heldList) pushFront(e *held) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
	l.n++
}

func (l *heldList) pushBack(e *held) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	}
	l.tail = e
	if l.head == nil {
		l.head = e
	}
	l.n++
}

func (l *heldList) unlink(e *held) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
}

// sketch is a count-min sketch of 4 rows of 8-bit counters saturating at 15 (how often an item
// was answered lately), halved every 10 answers per item held so that it forgets.
type sketch struct {
	rows    [4][]uint8
	mask    uint64
	added   int
	resetAt int
}

func newSketch(limit int) sketch {
	width := 64
	for width < 4*limit {
		width *= 2
	}
	var k sketch
	for i := range k.rows {
		k.rows[i] = make([]uint8, width)
	}
	k.mask, k.resetAt = uint64(width-1), 10*limit
	return k
}

// slot is id's counter in row i.
func (k *sketch) slot(id int64, i int) *uint8 {
	x := uint64(id) + uint64(i+1)*0x9e3779b97f4a7c15 // splitmix64, one seed per row
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return &k.rows[i][x&k.mask]
}

func (k *sketch) add(id int64) {
	for i := range k.rows {
		if c := k.slot(id, i); *c < 15 {
			*c++
		}
	}
	if k.added++; k.added >= k.resetAt {
		k.added = 0
		for _, row := range k.rows {
			for j := range row {
				row[j] /= 2
			}
		}
	}
}

func (k *sketch) estimate(id int64) uint8 {
	n := uint8(15)
	for i := range k.rows {
		n = min(n, *k.slot(id, i))
	}
	return n
}
