package database

import (
	"errors"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Violation is the kind of integrity rule a failed statement broke. Stores map it to gRPC codes
// (a unique violation is usually AlreadyExists, a foreign key one NotFound or
// FailedPrecondition), and the conformance suites use it to check that Postgres and SQLite reject
// the same rows for the same reason.
type Violation int

const (
	// NoViolation means the error is not an integrity violation (or there is no error).
	NoViolation Violation = iota
	// UniqueViolation is a duplicate key in a primary key, UNIQUE constraint or unique index.
	UniqueViolation
	// CheckViolation is a row failing a CHECK constraint.
	CheckViolation
	// NotNullViolation is a NULL in a NOT NULL column.
	NotNullViolation
	// ForeignKeyViolation is a reference to a missing row, or the deletion of a referenced one.
	ForeignKeyViolation
	// InvalidJSON is text that is not JSON given to a JSON column: Postgres refuses it as input
	// to jsonb, SQLite by the column's json_valid CHECK.
	InvalidJSON
)

// String returns the name of the violation, e.g. "unique".
func (v Violation) String() string {
	switch v {
	case NoViolation:
		return "none"
	case UniqueViolation:
		return "unique"
	case CheckViolation:
		return "check"
	case NotNullViolation:
		return "not null"
	case ForeignKeyViolation:
		return "foreign key"
	case InvalidJSON:
		return "invalid json"
	default:
		return "unknown"
	}
}

// ViolationOf reports which integrity rule err broke, for errors from pgx (directly or through
// database/sql) and from modernc.org/sqlite. It returns [NoViolation] for nil and for any other
// error.
func ViolationOf(err error) Violation {
	if err == nil {
		return NoViolation
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return postgresViolation(pgErr)
	}
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		return sqliteViolation(sqliteErr)
	}
	return NoViolation
}

// postgresViolation classifies by SQLSTATE (class 23, integrity constraint violation).
func postgresViolation(e *pgconn.PgError) Violation {
	switch e.Code {
	case "23505":
		return UniqueViolation
	case "23514":
		return CheckViolation
	case "23502":
		return NotNullViolation
	case "23503":
		return ForeignKeyViolation
	case "22P02": // invalid_text_representation: "invalid input syntax for type json"
		if strings.Contains(e.Message, "json") {
			return InvalidJSON
		}
	}
	return NoViolation
}

// sqliteJSONCheck matches the message of a failed json_valid(<column>) CHECK.
var sqliteJSONCheck = regexp.MustCompile(`CHECK constraint failed: json_valid\([a-z0-9_]+\)( \(\d+\))?$`)

// sqliteViolation classifies by extended result code when the driver reports one, else by the
// message SQLite writes for each constraint kind.
func sqliteViolation(e *sqlite.Error) Violation {
	code := e.Code()
	if code&0xff != sqlite3.SQLITE_CONSTRAINT {
		return NoViolation
	}
	msg := e.Error()
	switch {
	case code == sqlite3.SQLITE_CONSTRAINT_UNIQUE, code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY,
		strings.Contains(msg, "UNIQUE constraint failed"):
		return UniqueViolation
	case code == sqlite3.SQLITE_CONSTRAINT_CHECK, strings.Contains(msg, "CHECK constraint failed"):
		// Each JSON column has a CHECK that is exactly json_valid(<column>), and SQLite quotes
		// the failing expression of an unnamed CHECK in its message.
		if sqliteJSONCheck.MatchString(msg) {
			return InvalidJSON
		}
		return CheckViolation
	case code == sqlite3.SQLITE_CONSTRAINT_NOTNULL, strings.Contains(msg, "NOT NULL constraint failed"):
		return NotNullViolation
	case code == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, strings.Contains(msg, "FOREIGN KEY constraint failed"):
		return ForeignKeyViolation
	}
	return NoViolation
}
