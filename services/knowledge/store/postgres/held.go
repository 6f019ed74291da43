package postgres

import "github.com/converge-dev/converge/services/knowledge/store"

// maxHeld bounds the items a store holds in memory to answer queries. An item is about 1 KB
// (its content, evidence, pattern and tags) plus ~130 bytes of bookkeeping (the entry's own
// fields, its map slot): at most ~11 MB.
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

// heldSet is the items held, a segmented LRU: an item read enters on probation; answered again
// while held, it is protected. A new item evicts the item on probation answered least recently
// (a protected one only when none is on probation), and the protected items beyond their share
// go back on probation, least recently answered first. So the items queries keep asking for stay,
// and a stream of items answered once (rarely queried paths, a listing's worth of one-off
// answers) passes through probation without evicting them: p17know2 measured a random eviction
// holding fewer of a run's answers, and a plain LRU empties itself on any stream of one-off
// answers longer than it holds. Not safe for concurrent use: the store calls it with hits.mu
// held.
type heldSet struct {
	m                     map[int64]*held
	probation, protected  heldList
	limit, protectedLimit int
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
}

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

// add holds e as item id, on probation, evicting one item if full.
func (s *heldSet) add(id int64, e *held) {
	if len(s.m) >= s.limit {
		victim := s.probation.tail
		if victim == nil {
			victim = s.protected.tail
		}
		if victim != nil {
			s.remove(victim.item.ID)
		}
	}
	s.m[id] = e
	e.protected = false
	s.probation.pushFront(e)
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
