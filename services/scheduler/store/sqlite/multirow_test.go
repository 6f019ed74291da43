package sqlite

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChunkSizes: the chunks of n rows add up to n, none is larger than rowsPerInsert, and a
// table's inserts use few statement texts (each prepared once per connection).
func TestChunkSizes(t *testing.T) {
	texts := map[int]bool{}
	for n := range 5 * rowsPerInsert {
		sum := 0
		for _, k := range chunkSizes(n) {
			require.Positive(t, k)
			require.LessOrEqual(t, k, rowsPerInsert)
			sum += k
			texts[k] = true
		}
		require.Equal(t, n, sum, "chunks of %d rows", n)
	}
	require.Len(t, texts, 7, "sizes %v", texts)
	require.Equal(t, "INSERT INTO x VALUES (?), (?), (?) RETURNING id", multiRowSQL("INSERT INTO x VALUES ", "(?)", " RETURNING id", 3))
}
