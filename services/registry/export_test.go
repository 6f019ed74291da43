package registry

// WithCleanupHook calls f after every pass of the retention loop, so that tests can wait for a
// pass instead of for time.
func WithCleanupHook(f func(deleted int64, err error)) Option {
	return func(s *Server) { s.cleanupHook = f }
}
