package postgres

// HoldAtMost bounds the items st holds to n (maxHeld otherwise); call it before st answers.
func HoldAtMost(st *Store, n int) { st.hits.held.setLimit(n) }
