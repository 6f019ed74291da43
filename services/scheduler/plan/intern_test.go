package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The intern table gives each distinct path one id, its parent directories ids first, whatever
// the number of paths (it starts small and grows) and however often a path comes back.
func TestInternTableGivesEachPathOneIDAndItsParent(t *testing.T) {
	t.Parallel()
	tab := newInternTable(1) // grows many times
	want := map[string]int32{}
	for round := range 2 {
		for i := range 5000 {
			path := fmt.Sprintf("d%d/e%d/f%d.go", i%7, i%31, i)
			id := tab.intern(path)
			if round == 0 {
				_, seen := want[path]
				require.False(t, seen)
				want[path] = id
			}
			require.Equal(t, want[path], id, path)
			require.Equal(t, path, tab.keys[id])
		}
	}
	require.Len(t, tab.keys, 5000+7+7*31, "every file, and each directory once")
	for id, path := range tab.keys {
		parent := tab.parent[id]
		if i := strings.LastIndexByte(path, '/'); i > 0 {
			require.Less(t, parent, int32(id), "a parent is interned first")
			require.Equal(t, path[:i], tab.keys[parent])
		} else {
			require.EqualValues(t, -1, parent)
		}
	}
	require.Equal(t, tab.intern("d1"), tab.parent[tab.intern("d1/e1")])
}
