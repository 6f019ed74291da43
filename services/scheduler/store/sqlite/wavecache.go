package sqlite

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// placementCacheBytes bounds the detail text the cache holds (the cache is emptied when a new
// entry would pass it): a wave of 10,000 placements is about 1 MB of text.
const placementCacheBytes = 16 << 20

// placementCache keeps, per wave, the placements decoded from its detail column and the text
// they were decoded from. A wave's placements are written when its execution is created and
// rarely after, but GetExecution answers every wave with them, and every caller pays the
// protojson decoding of every placement on every read (a poller of a 1,000-task fan-out: about
// 0.9 ms of CPU per call; the watchers' tail reads the execution after each batch of entries). A
// row whose detail text equals the cached text gets copies of the cached placements
// (proto.Clone, several times cheaper than protojson); any other text is decoded and replaces
// the entry. Callers own what they get: the cache never hands out its own messages.
type placementCache struct {
	mu    sync.Mutex
	bytes int
	byID  map[string]cachedPlacements
}

type cachedPlacements struct {
	text       string
	placements []*schedulerv1.WavePlacement
}

// get answers copies of the placements decoded from text for wave id, if cached.
func (c *placementCache) get(id, text string) ([]*schedulerv1.WavePlacement, bool) {
	c.mu.Lock()
	e, ok := c.byID[id]
	c.mu.Unlock()
	if !ok || e.text != text {
		return nil, false
	}
	return clonePlacements(e.placements), true
}

// put caches copies of placements, decoded from text, for wave id.
func (c *placementCache) put(id, text string, placements []*schedulerv1.WavePlacement) {
	if len(text) > placementCacheBytes/4 {
		return
	}
	own := clonePlacements(placements)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byID[id]; ok {
		c.bytes -= len(old.text)
	}
	if c.byID == nil || c.bytes+len(text) > placementCacheBytes {
		c.byID, c.bytes = map[string]cachedPlacements{}, 0
	}
	c.byID[id] = cachedPlacements{text: text, placements: own}
	c.bytes += len(text)
}

func clonePlacements(ps []*schedulerv1.WavePlacement) []*schedulerv1.WavePlacement {
	out := make([]*schedulerv1.WavePlacement, len(ps))
	for i, p := range ps {
		out[i] = proto.CloneOf(p)
	}
	return out
}

// readWavesCached is readWaves with the placements of a wave whose detail did not change since
// the last read taken from the cache.
func (s *Store) readWavesCached(ctx context.Context, q querier, id string) ([]*schedulerv1.Wave, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+waveColumns+` FROM `+waveTables+`
		WHERE w.execution_id = ? ORDER BY w.wave_number`, id)
	return collect(rows, err, func(row scanner) (*schedulerv1.Wave, error) {
		r, err := scanWaveRowRaw(row)
		if err != nil {
			return nil, err
		}
		text := r.Detail
		if text == "{}" {
			return store.DecodeWave(r)
		}
		if ps, ok := s.placements.get(r.ID, text); ok {
			r.Detail = "{}"
			w, err := store.DecodeWave(r)
			if err != nil {
				return nil, err
			}
			w.Placements = ps
			return w, nil
		}
		w, err := store.DecodeWave(r)
		if err != nil {
			return nil, err
		}
		s.placements.put(r.ID, text, w.GetPlacements())
		return w, nil
	})
}
