package plan

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A node's stamp tells its sets apart, and a new generation empties them all, also when the
// generation wraps.
func TestSetTableStampsEachSetOfANode(t *testing.T) {
	t.Parallel()
	tab := newSetTable(3)
	for _, gen := range []uint32{1, maxGen - 1} {
		tab.gen = gen
		_, inserted := tab.put(1, classDir, key(1, classDir, 0), member{next: 1, nextW: 1, who: 7, whoW: -1})
		require.True(t, inserted)
		for node := range int32(3) {
			for class := range classes {
				require.Equal(t, node == 1 && class == classDir, tab.has(node, class), "gen %d node %d class %d", gen, node, class)
			}
		}
		require.NotNil(t, tab.get(key(1, classDir, 0)))
		tab.next()
		require.False(t, tab.has(1, classDir), "gen %d", gen)
		require.Nil(t, tab.get(key(1, classDir, 0)))
	}
	require.Equal(t, uint32(1), tab.gen, "the generation wrapped")
}
