// Package store is the Knowledge's storage: the [Store] interface its backends implement
// (postgres for production, sqlite embedded) and the SQL migrations they apply.
//
// The Knowledge owns its tables, and no other service reads or writes them: knowledge items and
// their full-text index. The conformance suite in ./storetest holds every backend to the same
// behaviour.
package store

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
	"unicode"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/knowledge/confidence"
)

// Service is the name the Knowledge's migrations are recorded under (version table
// converge_knowledge_migrations) and the suffix of its Postgres application_name.
const Service = "knowledge"

// migrations holds migrations/<dialect>/NNNN_name.sql, goose-annotated.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrations embed.FS

// Migrations returns the Knowledge's migration files for dialect d, NNNN_name.sql at the root
// of the returned file system. It panics for a dialect without migrations, a programming error.
func Migrations(d database.Dialect) fs.FS {
	switch d {
	case database.DialectPostgres, database.DialectSQLite:
		sub, err := fs.Sub(migrations, "migrations/"+string(d))
		if err != nil {
			panic(fmt.Sprintf("store: migrations for %s: %v", d, err))
		}
		return sub
	default:
		panic(fmt.Sprintf("store: no migrations for dialect %q", d))
	}
}

// Store is the Knowledge's durable state. Every backend implements all of it and passes
// ./storetest. Paths and patterns given to a store are valid already (platform/repopath); the
// store derives a pattern's index keys itself ([NewRow]). Times are passed in by the caller (the
// service's injectable clock) and kept to the millisecond on every backend.
type Store interface {
	// Ping reports whether the store can serve requests. The server's health is NOT_SERVING
	// until it succeeds, and a closed store fails it.
	Ping(ctx context.Context) error
	// Close releases the store's connections. It may be called more than once.
	Close() error

	// Record stores a new item, or, when an item of the same type and pattern with the same
	// normalised content ([NormalizeContent]) exists, confirms that one instead
	// (confidence.Confirm; its tags, source and confidence stay, and a non-empty evidence
	// replaces its evidence). created says which happened. It is atomic: racing records of one
	// item create it once and confirm it once per other record.
	Record(ctx context.Context, it NewItem, now time.Time) (item Item, created bool, err error)
	// Get returns the item with this id, or [ErrNotFound].
	Get(ctx context.Context, id int64) (Item, error)
	// List returns items newest first (by id), filtered and paged by f.
	List(ctx context.Context, f ListFilter) ([]Item, error)
	// Candidates returns up to q.Limit candidates in rank order ([Cursor]) after q.After: for a
	// path, the items whose pattern bucket is one of the path's (a superset of the items whose
	// pattern matches it: the caller confirms each with MatchPattern); for a pattern, the items
	// stored under exactly that pattern; otherwise all items. Every filter of q applies. It never
	// reads an item of another bucket, and reads each bucket best first. A candidate carries what
	// deciding on it takes; [Store.Answer] reads the items decided on.
	Candidates(ctx context.Context, q CandidateQuery) ([]Candidate, error)
	// Confirm applies [Confirmed] to an item (confidence.Confirm, the decay clock restarted, the
	// provisional cap lifted when by is not its recorder) and counts the confirmation; a
	// non-empty evidence replaces its evidence. [ErrNotFound] if there is none.
	Confirm(ctx context.Context, id int64, evidence, by string, now time.Time) (Item, error)
	// Refute applies confidence.Refute to an item and counts the refutation; a non-empty reason
	// replaces its evidence, as "refuted: <reason>". [ErrNotFound] if there is none.
	Refute(ctx context.Context, id int64, reason string, now time.Time) (Item, error)
	// Delete removes an item, or returns [ErrNotFound].
	Delete(ctx context.Context, id int64) error
	// Answer counts one hit on the item of each candidate and returns those items, hit counts
	// included, in no particular order. Items that no longer exist are left out. A backend may
	// count the hits in memory and write them later ([Store.FlushHits]); the items it returns,
	// here and from every other method, include the hits it has not written yet. A backend may
	// answer an item from memory when it holds it at the candidate's [Candidate.Revision] (the
	// item as it was when the candidate was read, or later).
	Answer(ctx context.Context, cands []Candidate) ([]Item, error)
	// FlushHits writes the hits counted and not yet written; once it returns, every hit counted
	// before it is in the table, and another store on the same database reads it. The service
	// flushes every second (its Start) and Close flushes, so hit counts are
	// eventually exact: a hit is lost only if the process dies before its flush, and another
	// replica's hits show up after its next flush. A read concurrent with a flush's commit may
	// count that flush's hits twice, once. A no-op on a backend that writes hits as it counts them.
	FlushHits(ctx context.Context) error
	// Preload holds in memory, to answer them without reading them, the items with most hits (the
	// items queries answered most, so those they will likely answer again), up to as many as the
	// store holds; it evicts none held already. The service preloads once at Start, in the
	// background. A no-op on a backend that holds no item.
	Preload(ctx context.Context) error
}

// ErrNotFound says that no item has the id asked for.
var ErrNotFound = errors.New("knowledge item not found")

// Type is the kind of an item, as stored.
type Type string

// The item types (the CHECK of knowledge_items.type).
const (
	TypeGotcha    Type = "gotcha"
	TypePattern   Type = "pattern"
	TypeDecision  Type = "decision"
	TypeDiscovery Type = "discovery"
)

// Source says where an item was learned: ids of another service's objects, "" if unknown.
type Source struct {
	ExecutionID string
	TaskID      string
	AgentID     string
}

// NewItem is an item to record.
type NewItem struct {
	Type    Type
	Content string
	// FilePattern is a valid glob in canonical form (repopath.CleanGlob).
	FilePattern string
	Tags        []string
	// Confidence is the initial confidence, in [0, 1].
	Confidence float64
	Source     Source
	Evidence   string
	// Project is the repository identity the item belongs to ("" the default project).
	Project string
	// RecordedBy is the principal that recorded it ("" when the server authenticates nobody).
	RecordedBy string
	// Provisional caps its confidence at confidence.UnconfirmedCap until a principal other than
	// RecordedBy confirms it.
	Provisional bool
}

// Item is a stored item.
type Item struct {
	ID          int64
	Type        Type
	Content     string
	FilePattern string
	// Specificity is PatternSpecificity of FilePattern.
	Specificity int32
	Tags        []string
	// Confidence is the stored confidence, before decay.
	Confidence float64
	// Rank is confidence.Rank(Confidence, LastConfirmedAt): the order of effective confidence.
	Rank            int64
	Source          Source
	Evidence        string
	HitCount        int64
	ConfirmCount    int64
	RefuteCount     int64
	CreatedAt       time.Time
	UpdatedAt       time.Time
	LastConfirmedAt time.Time
	// Project, RecordedBy and Provisional are as recorded (NewItem); ConfirmedBy is the principal
	// whose confirmation lifted the cap.
	Project     string
	RecordedBy  string
	Provisional bool
	ConfirmedBy string
}

// Candidate is an item as [Store.Candidates] returns it: what deciding whether to answer it takes.
type Candidate struct {
	ID          int64
	FilePattern string
	Confidence  float64
	Rank        int64
	Specificity int32
	// LastConfirmedAt is when it was last confirmed (or recorded).
	LastConfirmedAt time.Time
	// Revision is the item's [Item.Revision] when the candidate was read.
	Revision int64
}

// Cursor returns the candidate's position in rank order.
func (c Candidate) Cursor() Cursor {
	return Cursor{Rank: c.Rank, Specificity: c.Specificity, LastConfirmedAt: c.LastConfirmedAt, ID: c.ID}
}

// Cursor is a position in rank order: rank, then specificity, then last confirmation, then id,
// all descending. It is the order queries answer in.
type Cursor struct {
	Rank            int64
	Specificity     int32
	LastConfirmedAt time.Time
	ID              int64
}

// Revision is the item's confirmations plus refutations. Every change of an item but its hits
// counts one of them in the same write (Record of a twin, Confirm, Refute), so two reads of an
// item at the same revision read the same item, hit counts aside.
func (it Item) Revision() int64 { return it.ConfirmCount + it.RefuteCount }

// Cursor returns the item's position in rank order.
func (it Item) Cursor() Cursor {
	return Cursor{Rank: it.Rank, Specificity: it.Specificity, LastConfirmedAt: it.LastConfirmedAt, ID: it.ID}
}

// ListFilter selects and pages [Store.List].
type ListFilter struct {
	// Type keeps items of this type; "" keeps all.
	Type Type
	// FilePattern keeps items stored under exactly this pattern; "" keeps all.
	FilePattern string
	// Project keeps the items of this project; nil keeps every project's.
	Project *string
	// BeforeID starts the page after the item with this id (ids below it); 0 starts at the newest.
	BeforeID int64
	// Limit is the most items returned, at least 1.
	Limit int
}

// CandidateQuery selects [Store.Candidates]. At most one of Path and Pattern is set.
type CandidateQuery struct {
	// Path is a valid concrete path: candidates are the items in its buckets
	// (PathBuckets).
	Path string
	// Pattern is a canonical pattern: candidates are the items stored under exactly it.
	Pattern string
	// Project keeps the items of this project only ("" the default project).
	Project string
	// Types keeps items of these types; empty keeps all.
	Types []Type
	// Tags keeps items carrying every one of these tags.
	Tags []string
	// Text keeps items whose content or tags match every word of it (Postgres full text,
	// SQLite FTS5; both stem English words); "" keeps all.
	Text string
	// MinRank keeps items of at least this rank (confidence.MinRank); math.MinInt64 keeps all.
	MinRank int64
	// After continues after this position; nil starts at the best item.
	After *Cursor
	// Limit is the most items returned, at least 1.
	Limit int
}

// Row is what a backend writes for a new item: the item plus what the store derives from it.
type Row struct {
	NewItem
	ContentNormalized string
	ContentHash       string
	Bucket            Bucket
	Specificity       int32
	Rank              int64
	// Now is the item's creation, update and confirmation time, to the millisecond.
	Now time.Time
}

// NewRow derives the stored columns of a new item recorded at now.
func NewRow(it NewItem, now time.Time) Row {
	now = Truncate(now)
	normalized := NormalizeContent(it.Content)
	// Twins are per project: the project is folded into the hash the twin key holds (items of
	// the default project keep the hash of their content alone, as before projects).
	hashed := normalized
	if it.Project != "" {
		hashed = it.Project + "\x00" + normalized
	}
	sum := sha256.Sum256([]byte(hashed))
	if it.Provisional {
		it.Confidence = min(it.Confidence, confidence.UnconfirmedCap)
	}
	if it.Tags == nil {
		it.Tags = []string{}
	}
	return Row{
		NewItem:           it,
		ContentNormalized: normalized,
		ContentHash:       hex.EncodeToString(sum[:]),
		Bucket:            PatternBucket(it.FilePattern),
		Specificity:       PatternSpecificity(it.FilePattern),
		Rank:              confidence.Rank(it.Confidence, now),
		Now:               now,
	}
}

// Confirmed returns it after a confirmation at now with evidence by the principal by (see
// [Store.Confirm]), for the backends to write. A provisional item stays capped at
// confidence.UnconfirmedCap unless by is another principal than its recorder, whose
// confirmation lifts the cap for good.
func Confirmed(it Item, evidence, by string, now time.Time) Item {
	now = Truncate(now)
	if it.Provisional && by != it.RecordedBy {
		it.Provisional, it.ConfirmedBy = false, by
	}
	it.Confidence = confidence.Confirm(it.Confidence)
	if it.Provisional {
		it.Confidence = min(it.Confidence, confidence.UnconfirmedCap)
	}
	it.LastConfirmedAt = now
	it.UpdatedAt = now
	it.Rank = confidence.Rank(it.Confidence, now)
	if evidence != "" {
		it.Evidence = evidence
	}
	return it
}

// Refuted returns it after a refutation at now with reason (see [Store.Refute]), for the
// backends to write.
func Refuted(it Item, reason string, now time.Time) Item {
	now = Truncate(now)
	it.Confidence = confidence.Refute(it.Confidence)
	it.UpdatedAt = now
	it.Rank = confidence.Rank(it.Confidence, it.LastConfirmedAt)
	if reason != "" {
		it.Evidence = "refuted: " + reason
	}
	return it
}

// NormalizeContent folds content for deduplication: lower case, runs of white space as one
// space, none at the ends.
func NormalizeContent(content string) string {
	return strings.Join(strings.Fields(strings.ToLower(content)), " ")
}

// Truncate returns t in UTC to the millisecond, the precision every backend keeps.
func Truncate(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// FTSQuery turns free text into an FTS5 query that matches rows containing every word: each word
// (a run of letters and digits) quoted as a phrase. It is "" when text has no word.
func FTSQuery(text string) string {
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for i, w := range words {
		words[i] = `"` + w + `"`
	}
	return strings.Join(words, " ")
}
