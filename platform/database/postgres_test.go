package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

const password = "s3cr3t-pw"

func TestParsePostgresConfig(t *testing.T) {
	t.Parallel()

	t.Run("defaults and options", func(t *testing.T) {
		t.Parallel()
		config, err := database.ParsePostgresConfig("postgres://u:"+password+"@db.example:6543/converge?sslmode=disable",
			database.WithService("scheduler"), database.WithMaxConns(7))
		require.NoError(t, err)
		require.Equal(t, "converge-scheduler", config.ConnConfig.RuntimeParams["application_name"])
		require.Equal(t, "db.example", config.ConnConfig.Host)
		require.Equal(t, uint16(6543), config.ConnConfig.Port)
		require.Equal(t, "converge", config.ConnConfig.Database)
		require.Equal(t, int32(7), config.MaxConns)
		require.Equal(t, 10*time.Second, config.ConnConfig.ConnectTimeout)
	})

	t.Run("the URL wins", func(t *testing.T) {
		t.Parallel()
		config, err := database.ParsePostgresConfig("postgresql://u@h/db?application_name=mine&connect_timeout=3&pool_max_conns=2",
			database.WithService("scheduler"))
		require.NoError(t, err)
		require.Equal(t, "mine", config.ConnConfig.RuntimeParams["application_name"])
		require.Equal(t, 3*time.Second, config.ConnConfig.ConnectTimeout)
		require.Equal(t, int32(2), config.MaxConns)
	})
}

func TestParsePostgresConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want string // part of the error naming what is wrong
	}{
		{"", "URL is empty"},
		{"host=localhost password=" + password, "keyword/value connection strings are not supported"},
		{"mysql://u:" + password + "@h/db", `scheme "mysql"`},
		{"postgres://u:" + password + "@h:99999/db", `port "99999"`},
		{"postgres://u:" + password + "@h:port/db", `invalid port ":port"`},
		{"postgres://u:" + password + "@h/db/extra", `database name "db/extra"`},
		{"postgres://u:" + password + "@h/db?sslmode=maybe", "sslmode"},
		{"postgres://u:" + password + "@h/db?connect_timeout=soon", "connect_timeout"},
		{"postgres://u:" + password + "%zz@h/db", "invalid URL escape"},
		{"postgres://u:" + password + "@h/db?password=" + password + "&pool_max_conns=many", "pool_max_conns"},
	} {
		_, err := database.ParsePostgresConfig(tc.url)
		require.Error(t, err, tc.url)
		require.ErrorContains(t, err, tc.want, tc.url)
		require.NotContains(t, err.Error(), password, "the error shows the password")
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		database.RedactURL("postgres://u:"+password+"@h:5432/db?sslmode=disable"))
	require.Equal(t, "postgres://u@h/db", database.RedactURL("postgres://u@h/db"))
	require.NotContains(t, database.RedactURL("postgres://h/db?password="+password), password)
	require.NotContains(t, database.RedactURL("postgres://u:"+password+"@h:x/db"), password)
}

// TestOpenPostgresLazy checks that a service can start while Postgres is down: opening succeeds,
// Ping fails until it is up.
func TestOpenPostgresLazy(t *testing.T) {
	t.Parallel()
	// Port 1 on the loopback interface refuses connections at once.
	pool, err := database.OpenPostgres(t.Context(), "postgres://u:"+password+"@127.0.0.1:1/db?sslmode=disable")
	require.NoError(t, err)
	defer pool.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = database.PingPostgres(ctx, pool)
	require.ErrorContains(t, err, "ping Postgres")
	require.NotContains(t, err.Error(), password)
}

func TestPingPostgres(t *testing.T) {
	t.Parallel()
	pool, err := database.OpenPostgres(t.Context(), dbtest.Postgres(t), database.WithService("dbtest"))
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, database.PingPostgres(t.Context(), pool))

	var name string
	require.NoError(t, pool.QueryRow(t.Context(), "SHOW application_name").Scan(&name))
	require.Equal(t, "converge-dbtest", name)
}
