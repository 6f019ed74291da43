package storetest

import (
	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
)

// Where the backends keep a wave's placements (its detail): Postgres in the wave row, SQLite in a
// table of its own (its migration 0012: SQLite writes a row whole, and a wave's placements are
// ≈ 100 bytes per task, rewritten by every claim's and completion's counter update).
var (
	postgresWaveCases = []harness.Case{{
		Name:  "wave with placements",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE parallel_execution_waves SET detail = '{"placements": [{"taskId": "1.2"}]}' WHERE wave_id = 'w1'`),
	}, {
		Name:  "wave detail not JSON",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE parallel_execution_waves SET detail = '{' WHERE wave_id = 'w1'`),
		Want:  database.InvalidJSON,
	}}
	sqliteWaveCases = []harness.Case{{
		Name:  "wave with placements",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES ('w1', '{"placements": [{"taskId": "1.2"}]}')`),
	}, {
		Name:  "wave detail not JSON",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES ('w1', '{')`),
		Want:  database.InvalidJSON,
	}, {
		Name:  "wave detail not an object",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES ('w1', '[]')`),
		Want:  database.CheckViolation,
	}, {
		Name:  "placements of an unknown wave",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES ('nope', '{}')`),
		Want:  database.ForeignKeyViolation,
	}, {
		Name:  "second placements of a wave",
		Setup: with(harness.S(`INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES ('w1', '{}')`)),
		Stmt:  harness.S(`INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES ('w1', '{}')`),
		Want:  database.UniqueViolation,
	}}
)
