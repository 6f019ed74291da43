// Package security is converge's security suite: every finding of the trust
// model (docs/security.md) run as an attack against the real binaries, started
// through platform/clustertest with Postgres and Redis. Each test names the
// finding it proves fixed; docs/security.md's table points back at them.
package security
